"""zephyr.pipelines.web: from raw web crawls to clean text — WARC text extraction and URL rules.

- ``extract``: ``read_warc`` / ``ExtractText`` (resiliparse or trafilatura) over ``zephyr.io.warc``'s records;
- ``urls``: URL normalization, registered domains (tldextract, offline) and the ``url`` filter rule family;
- ``cli``: ``zephyr extract``.
"""
