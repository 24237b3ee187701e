"""Start-up errors: a port another daemon holds, a --listen-host that does not resolve."""

import subprocess

RUN_TIMEOUT = 20


def start(sandboxd_bin, root, *flags):
    return subprocess.run([str(sandboxd_bin), "--rest-port", "0", "--root-dir", str(root), *flags],
                          capture_output=True, timeout=RUN_TIMEOUT)


def test_port_held_by_another_daemon_is_refused(sandboxd, sandboxd_bin, tmp_path):
    # gRPC binds with SO_REUSEPORT unless told not to: a second daemon would share the port.
    p = start(sandboxd_bin, tmp_path, "--listen-host", "127.0.0.1", "--grpc-port",
              str(sandboxd.port))
    assert p.returncode == 1, p
    assert b"cannot listen on '127.0.0.1:%d'" % sandboxd.port in p.stderr, p.stderr
    assert sandboxd.client().execute(["true"]).exit_code == 0


def test_unresolvable_listen_host(sandboxd_bin, tmp_path):
    p = start(sandboxd_bin, tmp_path, "--listen-host", "no-such-host.invalid", "--grpc-port", "0")
    assert p.returncode == 1, p
    assert b"--listen-host no-such-host.invalid:" in p.stderr, p.stderr
    assert b"give an address" in p.stderr


def test_rest_port_held_by_another_daemon_is_refused(sandboxd, sandboxd_bin, tmp_path):
    p = subprocess.run([str(sandboxd_bin), "--listen-host", "127.0.0.1", "--grpc-port", "0",
                        "--rest-port", str(sandboxd.rest_port), "--root-dir", str(tmp_path)],
                       capture_output=True, timeout=RUN_TIMEOUT)
    assert p.returncode == 1, p
    assert str(sandboxd.rest_port).encode() in p.stderr, p.stderr


def test_restart_on_the_same_ports(sandboxd_factory):
    """A daemon restarted in the same network namespace (a container restarted in its pod) binds
    the same ports again, though connections its predecessor closed linger in TIME_WAIT."""
    import http.client
    a = sandboxd_factory()
    ports = (a.port, a.rest_port)
    conns = []
    for _ in range(3):
        c = http.client.HTTPConnection("127.0.0.1", a.rest_port, timeout=10)
        c.request("GET", "/v1/health")
        assert c.getresponse().read()
        conns.append(c)  # kept open: the daemon closes them as it stops (TIME_WAIT on its side)
    assert a.client().execute(["true"]).exit_code == 0
    a.close_clients()
    a.stop_and_check()
    for c in conns:
        c.close()
    b = sandboxd_factory(["--grpc-port", str(ports[0]), "--rest-port", str(ports[1])])
    assert (b.port, b.rest_port) == ports
    assert b.client().execute(["true"]).exit_code == 0
