"""--max-output-memory: one bound on the process output the daemon holds in memory, all processes
together (Execute's captures, the rings of spawned processes and of Run). What does not fit is
dropped as output past a per-process cap is (Run and Attach report it), the daemon keeps serving,
and the memory comes back when its holder goes."""

import re

import pytest

from conftest import Procs, http_request, wait_until

MIB = 1 << 20


def output_metrics(d):
    body = http_request(d.rest_port, "GET", "/metrics").body.decode()
    held = re.search(r"^sandboxd_output_memory_bytes (\d+)$", body, re.M)
    refused = re.search(r"^sandboxd_output_memory_refused_bytes_total (\d+)$", body, re.M)
    assert held and refused, body
    return int(held.group(1)), int(refused.group(1))


@pytest.fixture
def budgeted(sandboxd_factory):
    d = sandboxd_factory(["--max-output-memory", str(MIB)])
    d.procs = Procs(d.client().channel, d.protos)
    return d


def test_execute_capture_stays_within_the_budget(budgeted):
    d = budgeted
    c = d.client()
    # Past the budget, not past the per-stream cap (16 MiB): only the budget cuts it.
    r = c.execute(["head", "-c", str(3 * MIB), "/dev/zero"])
    assert r.exit_code == 0
    assert 0 < len(r.stdout) <= MIB and r.stdout == b"\0" * len(r.stdout)
    held, refused = output_metrics(d)
    assert refused > 0
    wait_until(lambda: output_metrics(d)[0] == 0, 10, what="the capture's memory given back")
    # Given back: a small capture after it is whole.
    r = c.execute(["head", "-c", "100000", "/dev/zero"])
    assert len(r.stdout) == 100000
    assert any("output memory budget" in ln for ln in d.lines)


def test_budget_is_shared_and_given_back(budgeted):
    d = budgeted
    c, p = d.client(), d.procs
    # A spawned process whose ring (1 MiB per stream by default) takes the whole budget and
    # keeps it while the process is listed.
    info = p.spawn(["sh", "-c", f"head -c {2 * MIB} /dev/zero; exec sleep 60"])
    wait_until(lambda: output_metrics(d)[0] >= MIB // 2, 10, what="the ring filled")
    held, _ = output_metrics(d)
    assert held <= MIB
    # What is left is not enough for another capture of 1 MiB.
    r = c.execute(["head", "-c", str(MIB), "/dev/zero"])
    assert len(r.stdout) < MIB
    # A Run over budget reports its output as truncated (its ring could not hold it).
    run = p.run(["head", "-c", str(MIB), "/dev/zero"])
    assert run.stdout_total == MIB and run.stdout_truncated and len(run.stdout) < MIB
    # The spawned process's ring keeps the tail it could hold, and Attach says what it missed.
    out, _, truncs, _, _ = p.attach(info.id, follow=False)
    assert 0 < len(out) <= MIB and truncs
    # Gone, its memory comes back: a capture of 1 MiB is whole again.
    p.signal(info.id, 9)
    p.wait(info.id)
    p.remove(info.id)
    wait_until(lambda: output_metrics(d)[0] == 0, 10, what="the ring's memory given back")
    r = c.execute(["head", "-c", str(MIB), "/dev/zero"])
    assert len(r.stdout) == MIB
    assert c.health().status == 1  # SERVING


def test_no_bound_with_zero(sandboxd_factory):
    d = sandboxd_factory(["--max-output-memory", "0"])
    r = d.client().execute(["head", "-c", str(3 * MIB), "/dev/zero"])
    assert len(r.stdout) == 3 * MIB
    assert output_metrics(d)[1] == 0


def test_bad_value_refused(sandboxd_bin, tmp_path):
    import subprocess
    p = subprocess.run([sandboxd_bin, "--max-output-memory", "lots", "--root-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode != 0 and "max-output-memory" in p.stderr
