"""Run at start-up by every Python process of the job's Ray (this folder leads their PYTHONPATH).

Ray's Prometheus servers (each node's metrics export, the head's autoscaler and dashboard metrics) bind every address
unless the node's address is loopback, and Ray has no setting for it; they answer without the Ray token. Here a
wildcard bind of a WSGI server (what both prometheus_client and Ray's exporter use) takes BEAM_RAY_METRICS_HOST, the
node's address, instead. Then the next `sitecustomize` on the path, if any, runs as it would have.
"""

import importlib.machinery
import importlib.util
import os
import sys
import wsgiref.simple_server as simple_server


def _bind_metrics_to_the_node() -> None:
    host = os.environ.get("BEAM_RAY_METRICS_HOST", "")
    if not host:
        return
    wildcard = {"", "0.0.0.0", "::"}
    original = simple_server.make_server

    def make_server(address, port, app, *args, **kwargs):
        return original(host if address in wildcard else address, port, app, *args, **kwargs)

    simple_server.make_server = make_server  # type: ignore[assignment]  # one wrapper for all of the stub's overloads


def _run_the_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_bind_metrics_to_the_node()
_run_the_next_sitecustomize()
