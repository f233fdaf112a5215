"""The IPv4 address a node gives Ray (`--node-ip-address`: with several networks Ray's own guess is unreliable, and
some hosts map their hostname to 127.0.1.1), and TCP reachability."""

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
            raise OSError(
                f"network interface {interface!r} has no IPv4 address on {socket.gethostname()} "
                f"(interfaces here: {names}); fix ray.network_interface"
            ) from exc
    return socket.inet_ntoa(packed[20:24])


def node_ipv4(interface: str = "", head_ip: str | None = None) -> str:
    """This node's address for Ray: the interface's, the hostname's (not loopback), or the route's to the head."""
    if interface:
        return interface_ipv4(interface)
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror:
        infos = []
    address = next((address for *_, (address, *_) in infos if not ipaddress.ip_address(address).is_loopback), None)
    if address:
        return str(address)  # an AF_INET address: already a str
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((head_ip or _ANY_PUBLIC_ADDRESS, 9))  # no packet is sent: connect() only picks the route
            return probe.getsockname()[0]
    except OSError:
        raise OSError(
            f"{socket.gethostname()} resolves only to a loopback address; set ray.network_interface "
            "to the interface of the cluster network (e.g. eth0 or ib0)"
        ) from None


def tcp_reachable(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True when a TCP connection to host:port opens within `timeout_s` (a listener is there and answers)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False
