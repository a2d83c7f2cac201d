"""zephyr.pipelines.quality: normalization, language ID, heuristic filters, quality classifier, PII, decontamination."""
