"""Which of nats-server's config keys headwater-server ignores, and which it refuses.

Keys handled for real are the handlers in ``fileopts``. The rest of nats-server 2.15's keys
(the lists were checked against ``nats-server -t``: every name here is one it knows) split by
what ignoring them would do:

* IGNORED: the feature is simply absent here (another listener, another log sink, a tuning
  knob); a client that needs it sees it missing. Accepted, with a notice.
* REFUSED: ignoring the key would admit clients the operator meant to keep out, deliver
  messages to other subjects, or store data unencrypted. An error names the key and the
  feature, so nobody runs with less protection than their config asks for.
"""

from __future__ import annotations


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _reason(text: str, reason: str) -> dict[str, str]:
    return dict.fromkeys(text.split(), reason)


TOP_IGNORED = _words(
    """
    trace_headers logtime_utc disable_sublist_cache no_sublist_cache https
    https_port http_base_path gateway leaf leafnodes logfile_size_limit log_size_limit
    logfile_max_num log_max_num syslog remote_syslog prof_port prof_block_rate
    max_traced_msg_len max_subscriptions max_subs max_sub_tokens max_subscription_tokens ocsp
    ocsp_cache allow_non_tls write_timeout resolver_tls resolver_preload
    resolver_pinned_accounts no_auth_user system_account system no_system_account no_system
    no_sys_acc no_header_support connect_error_reports reconnect_error_reports websocket ws
    mqtt default_js_domain max_closed_clients no_fast_producer_stall
    server_metadata proxies feature_flags default_sentinel
    """
)
TOP_REFUSED = {
    **_reason("accounts", "multiple accounts"),
    **_reason("mappings maps", "subject mappings"),
    **_reason(
        "operator operators root roots root_operator root_operators trusted trusted_keys",
        "operator (JWT) authentication",
    ),
    **_reason("resolver account_resolver accounts_resolver", "account resolvers (JWT)"),
    **_reason("ports_file_dir", "ports files"),
}
AUTH_REFUSED = {
    **_reason("permissions default_permission default_permissions", "permissions"),
    **_reason("auth_callout", "auth callout"),
}
USER_REFUSED = {
    **_reason("permission permissions authorization", "permissions"),
    **_reason("allowed_connection_types connection_types", "connection type limits"),
    **_reason("clients", "per-user client options"),
}
TLS_IGNORED = _words("cipher_suites curve_preferences insecure connection_rate_limit")
TLS_REFUSED = {
    **_reason(
        """verify_and_map verify_cert_and_check_known_urls pinned_certs cert_store cert_match
        cert_match_by cert_match_skip_invalid ca_certs_match ocsp_peer""",
        "certificate-based identities and stores",
    ),
    **_reason("min_version", "choosing the minimum TLS version"),
}
JS_IGNORED = _words(
    """
    unique_tag max_outstanding_catchup max_buffered_size max_buffered_msgs
    strict limits extension_hint meta_compact meta_compact_size meta_compact_sync
    """
)
JS_REFUSED = _reason("cipher key prev_key tpm", "encryption at rest")
CLUSTER_IGNORED = _words("connect_backoff")
#: Route settings Headwater does not implement: refused, never accepted and ignored.
CLUSTER_REFUSED = {
    "permissions": "route import/export permissions",
    "accounts": "per-account routes",
    "pinned_accounts": "per-account routes",
    "write_deadline": "a route write deadline apart from the server's",
    "write_timeout": "a route write timeout policy",
}
