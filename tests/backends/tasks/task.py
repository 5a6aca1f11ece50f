"""A tiny stand-in for a training task: no TensorFlow, behaviour from the environment.

``BEHAVIOR`` (or ``BEHAVIOR_<index>`` for one index of the role) is a comma-separated list
of steps, run in order:

- ``listen``: bind this task's own address from TF_CONFIG (as a gRPC server would)
- ``connect:<role>``: connect to every address of ``role`` (retrying for a few seconds)
- ``print:<n>``: print ``line 1 .. line n``
- ``spawn``: start a grandchild process that sleeps (it must die with the task)
- ``ignore_term``: ignore SIGTERM (so only SIGKILL stops it)
- ``flaky:<n>/<code>``: exit ``code`` on the first ``n`` attempts, then go on
- ``sleep[:<s>]``: sleep ``s`` seconds (forever without ``s``), like a PS in ``join()``
- ``exit:<code>``: exit with ``code``

Each task writes ``$TEST_RECORD_DIR/<role>-<index>.<pid>.json`` with its environment,
argv, cwd, pid, parent pid (the supervisor) and grandchild pids, so the tests can check
the env contract and that every process ever started is gone.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time


def record(name, extra):
    out = os.environ.get("TEST_RECORD_DIR")
    if not out:
        return
    data = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "executable": sys.executable,
        "env": dict(os.environ),
        **extra,
    }
    path = os.path.join(out, f"{name}.{os.getpid()}.json")
    with open(path + ".tmp", "w") as fh:
        json.dump(data, fh)
    os.replace(path + ".tmp", path)


def main():
    config = json.loads(os.environ["TF_CONFIG"])
    role, index = config["task"]["type"], config["task"]["index"]
    name = f"{role}-{index}"
    behavior = os.environ.get(f"BEHAVIOR_{index}") or os.environ.get("BEHAVIOR", "exit:0")
    grandchildren = []
    servers = []
    print(f"task {name} starting: {behavior}", flush=True)
    record(name, {"grandchildren": grandchildren})
    for step in behavior.split(","):
        kind, _, arg = step.partition(":")
        if kind == "listen":
            host, port = config["cluster"][role][index].rsplit(":", 1)
            sock = socket.socket()
            sock.bind((host, int(port)))
            sock.listen(16)
            servers.append(sock)
        elif kind == "connect":
            for addr in config["cluster"].get(arg, []):
                host, port = addr.rsplit(":", 1)
                give_up = time.monotonic() + 10
                while True:
                    try:
                        socket.create_connection((host, int(port)), timeout=1).close()
                        break
                    except OSError:
                        if time.monotonic() > give_up:
                            print(f"cannot reach {arg} at {addr}", flush=True)
                            sys.exit(5)
                        time.sleep(0.05)
            print(f"reached every {arg}", flush=True)
        elif kind == "print":
            for i in range(1, int(arg) + 1):
                print(f"line {i}", flush=True)
        elif kind == "spawn":
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
            grandchildren.append(child.pid)
            record(name, {"grandchildren": grandchildren})
        elif kind == "ignore_term":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        elif kind == "flaky":
            n, code = (int(x) for x in arg.split("/"))
            counter = os.path.join(
                os.environ.get("TFK_DATA_DIR") or os.environ["TEST_RECORD_DIR"], f"{name}.attempts"
            )
            attempts = int(open(counter).read()) + 1 if os.path.exists(counter) else 1
            with open(counter, "w") as fh:
                fh.write(str(attempts))
            if attempts <= n:
                print(f"attempt {attempts}: failing with {code}", flush=True)
                sys.exit(code)
            print(f"attempt {attempts}: ok", flush=True)
        elif kind == "sleep":
            end = time.monotonic() + (float(arg) if arg else 10**9)
            while time.monotonic() < end:
                time.sleep(0.5)
        elif kind == "exit":
            print(f"task {name} exiting with {arg}", flush=True)
            sys.exit(int(arg))
        else:
            print(f"unknown step {step!r}", flush=True)
            sys.exit(99)


if __name__ == "__main__":
    main()
