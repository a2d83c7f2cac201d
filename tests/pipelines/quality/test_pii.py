import pyarrow as pa
import pytest
from zephyr.pipelines.quality.config import PIIConfig
from zephyr.pipelines.quality.pii import RedactPII

from zephyr.errors import ConfigError


def _one(text, **cfg):
    row = RedactPII(PIIConfig(**cfg))(pa.table({"text": [text]})).to_pylist()[0]
    return row["text"], {k[4:]: v for k, v in row.items() if k.startswith("pii_")}


@pytest.mark.parametrize(
    "text, kind",
    [
        ("write to jane.doe+news@mail.example.co.uk today", "email"),
        ("server 192.168.1.254 is down", "ipv4"),
        ("host 2001:0db8:85a3:0000:0000:8a2e:0370:7334 up", "ipv6"),
        ("link fe80::1ff:fe23:4567:890a ok", "ipv6"),
        ("call +1 (555) 123-4567 now", "phone"),
        ("ring 020 7946 0958 please", "phone"),
        ("dial +442079460958 now", "phone"),
    ],
)
def test_each_kind_is_replaced_and_counted(text, kind):
    out, counts = _one(text)
    assert counts[kind] == 1 and sum(counts.values()) == 1
    assert "<" in out and text.split()[0] in out


@pytest.mark.parametrize(
    "text",
    [
        "std::vector<int> v; a::b",
        "at 12:30:45 on 2021-01-01",
        "id 1234567890 and 3.14159",
        "x = 255.1",
        "999.1.1.1",
    ],
)
def test_no_false_positives_on_code_times_dates(text):
    out, counts = _one(text)
    assert out == text and sum(counts.values()) == 0


def test_ip_is_not_also_a_phone_and_nulls_are_zero():
    t = RedactPII()(pa.table({"text": ["10.20.30.40 and 100.200.100.200", None, ""]}))
    assert t["pii_ipv4"].to_pylist() == [2, 0, 0] and t["pii_phone"].to_pylist() == [0, 0, 0]
    assert t["text"].to_pylist() == ["<IP_ADDRESS> and <IP_ADDRESS>", None, ""]


def test_kinds_and_placeholders_are_config():
    out, counts = _one("a@b.org 1.2.3.4", kinds=("email",), placeholders={"email": "[E]"})
    assert out == "[E] 1.2.3.4" and counts == {"email": 1}
    with pytest.raises(ConfigError):
        PIIConfig(kinds=("ssn",))
