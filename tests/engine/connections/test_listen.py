"""``connections.listen``: which socket an address gets, and how peers and addresses print."""

from __future__ import annotations

import socket

import pytest

from headwater.server.connections.listen import join_host_port, listen_socket, peer_ip


def test_ipv4_mapped_peers_print_as_ipv4() -> None:
    assert peer_ip("::ffff:127.0.0.1") == "127.0.0.1"
    assert peer_ip("::ffff:10.1.2.3") == "10.1.2.3"
    assert peer_ip("::1") == "::1"
    assert peer_ip("127.0.0.1") == "127.0.0.1"
    assert peer_ip("::ffff:zz") == "::ffff:zz"  # not an address: left as it came


def test_join_host_port_brackets_ipv6() -> None:
    assert join_host_port("0.0.0.0", 4222) == "0.0.0.0:4222"
    assert join_host_port("::1", 4222) == "[::1]:4222"
    assert join_host_port("localhost", 1) == "localhost:1"


def test_a_literal_ipv4_address_is_ipv4_only() -> None:
    with listen_socket("127.0.0.1", 0) as sock:
        assert sock.family == socket.AF_INET
        assert sock.getsockname()[0] == "127.0.0.1"


def test_a_name_prefers_its_ipv4_address() -> None:
    with listen_socket("localhost", 0) as sock:
        assert sock.family == socket.AF_INET


@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6")
def test_a_literal_ipv6_address_is_ipv6_only() -> None:
    try:
        sock = listen_socket("::1", 0)
    except OSError:
        pytest.skip("no IPv6 loopback")
    with sock:
        assert sock.family == socket.AF_INET6
        assert sock.getsockname()[0] == "::1"


def test_a_port_in_use_names_the_address() -> None:
    with listen_socket("127.0.0.1", 0) as taken:
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=rf"bind on address 127\.0\.0\.1:{port}"):
            listen_socket("127.0.0.1", port).close()
