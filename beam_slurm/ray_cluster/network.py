"""The IPv4 address a node gives Ray: a named interface's, else the hostname's, else the source of the route to the
head (workers) or of the default route (head).

Nodes with several networks (Ethernet, InfiniBand, a management net) make Ray's own guess unreliable, and some hosts
map their hostname to 127.0.1.1 in /etc/hosts; every node therefore passes an explicit `--node-ip-address`.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct

_SIOCGIFADDR = 0x8915
_ANY_PUBLIC_ADDRESS = "198.51.100.1"  # documentation range: only used to select the default route


def interface_ipv4(interface: str) -> str:
    """IPv4 address of `interface` (e.g. `ib0`); OSError naming the interface when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            packed = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", interface.encode()[:15]))
        except OSError as exc:
            names = ", ".join(name for _, name in socket.if_nameindex())
            raise OSError(f"network interface {interface!r} has no IPv4 address on {socket.gethostname()} "
                          f"(interfaces here: {names}); fix ray.network_interface") from exc
    return socket.inet_ntoa(packed[20:24])


def hostname_ipv4(hostname: str | None = None) -> str | None:
    """A non-loopback IPv4 address the hostname resolves to, or None."""
    hostname = hostname or socket.gethostname()
    try:
        infos = socket.getaddrinfo(hostname, None, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror:
        return None
    return next((address for *_, (address, *_) in infos if not ipaddress.ip_address(address).is_loopback), None)


def route_source_ipv4(destination: str) -> str:
    """The local address the kernel would use to reach `destination` (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((destination, 9))
        return probe.getsockname()[0]


def node_ipv4(interface: str = "", head_ip: str | None = None) -> str:
    """This node's address for Ray: the interface's, the hostname's, or the source of the route to the head."""
    if interface:
        return interface_ipv4(interface)
    address = hostname_ipv4()
    if address:
        return address
    try:
        # No packet is sent: connect() on a UDP socket only picks the route.
        return route_source_ipv4(head_ip or _ANY_PUBLIC_ADDRESS)
    except OSError:
        raise OSError(f"{socket.gethostname()} resolves only to a loopback address; set ray.network_interface "
                      "to the interface of the cluster network (e.g. eth0 or ib0)") from None


def tcp_reachable(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True when a TCP connection to host:port opens within `timeout_s` (a listener is there and answers)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False
