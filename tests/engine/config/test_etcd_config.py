"""``cluster { etcd: [...] }`` against ``cluster { tls {} }``: etcd follows the cluster's TLS.

An external etcd is dialled with the cluster's TLS files as client credentials, so https URLs
need them, and a cluster with TLS does not talk to its metadata in plaintext; URLs that are
not ``http(s)://host:port`` are refused where they are written.
"""

from __future__ import annotations

import pytest

from headwater.server.config import ConfigError

TLS = "tls { cert_file: cert.pem, key_file: key.pem, ca_file: ca.pem }"


def cluster(body: str) -> str:
    return f"cluster {{ port: 6222\n{body}\n}}\n"


def test_https_etcd_urls_use_the_cluster_tls_files(conf) -> None:
    settings = conf(cluster(f'etcd: ["https://e1:2379", "https://e2:2379"]\n{TLS}')).settings
    assert settings.cluster.etcd == ("https://e1:2379", "https://e2:2379")
    assert settings.cluster.tls.ca_file == "ca.pem"
    # The order of the keys in the block does not matter.
    assert conf(cluster(f'{TLS}\netcd: ["https://e1:2379"]')).settings.cluster.etcd


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            'etcd: ["https://e1:2379"]',
            r"cluster.etcd: https etcd URLs need the cluster's TLS files "
            r"\(cluster \{ tls \{ cert_file, key_file, ca_file \} \}\)",
        ),
        (
            f'etcd: ["http://e1:2379"]\n{TLS}',
            r"cluster.etcd: the cluster has TLS but etcd URL 'http://e1:2379' is plain http",
        ),
        (
            f'etcd: ["https://e1:2379", "http://e2:2379"]\n{TLS}',
            r"cluster.etcd: the cluster has TLS but etcd URL 'http://e2:2379' is plain http",
        ),
        ('etcd: ["unix://e1:2379"]', r"cluster.etcd\[0\]: .*expected http://host:port"),
        ('etcd: ["http://e1"]', r"cluster.etcd\[0\]: .*expected http://host:port"),
    ],
)
def test_etcd_urls_that_cannot_work_are_refused(conf, body: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        conf(cluster(body))
