"""How the TensorBoard pod starts TensorBoard: its own ``main`` with one WSGI wrapper,
as a ``python3 -c`` script, so it works with any image that has TensorBoard (the default
``tensorflow/tensorflow`` has no airflow_tfk).

Why: TensorBoard serves ``index.html`` with ``Content-Encoding: identity``, and the API
server's service proxy, which rewrites links in ``text/html`` answers, knows only gzip,
deflate or no encoding. On any other it closes the body and still sends the answer, so
the page aborts with no response (kube-apiserver 1.36 logs "Proxy encountered unknown
encoding for text/html"). The real node showed it: the data endpoints answered through the
proxy, the page never did. ``identity`` means "not encoded", so dropping the header
changes nothing for any other client.

``tensorboard/main.py`` invites this ("those wishing to customize ... can swap out this
file with their own"); the script mirrors its ``run_main`` with a ``server_class`` that
wraps the app.
"""

from __future__ import annotations

# No "$" anywhere: the kubelet expands $(VAR) in a container's command.
SCRIPT = """\
import sys
from absl import app
from tensorboard import default, main_lib, program
from tensorboard.plugins import base_plugin


def without_identity_encoding(wsgi_app):
    def wrapped(environ, start_response):
        def start(status, headers, exc_info=None):
            headers = [
                (k, v)
                for k, v in headers
                if not (k.lower() == "content-encoding" and v.strip().lower() == "identity")
            ]
            return start_response(status, headers, exc_info)

        return wsgi_app(environ, start)

    return wrapped


def server(wsgi_app, flags):
    return program.create_port_scanning_werkzeug_server(without_identity_encoding(wsgi_app), flags)


main_lib.global_init()
board = program.TensorBoard(plugins=default.get_plugins(), server_class=server)
try:
    app.run(board.main, flags_parser=board.configure)
except base_plugin.FlagsError as e:
    print("Error: %s" % e, file=sys.stderr)
    sys.exit(1)
"""


def command() -> list[str]:
    """The container's command; TensorBoard's flags follow as its args."""
    return ["python3", "-c", SCRIPT]
