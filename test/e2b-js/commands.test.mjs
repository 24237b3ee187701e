// sandbox.commands and sandbox.pty of the unmodified e2b JavaScript SDK against sandboxd's E2B
// port, directly or through the router (the JS twin of test/e2b/test_sdk_commands.py).

import assert from 'node:assert/strict'
import { mkdtempSync, readFileSync, existsSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, test } from 'node:test'

import { Daemon, OWN_DAEMON, ROUTED, e2b, openSandbox, procExists, stillUp, waitUntil } from './harness.mjs'

const { CommandExitError, InvalidArgumentError, NotFoundError, TimeoutError, AuthenticationError } = e2b
const UNKNOWN_PID = 2 ** 31 - 7

let daemon, sbx, scratch
before(async () => {
  ({ daemon, sbx } = await openSandbox())
  scratch = mkdtempSync(join(tmpdir(), 'e2b-js-cmd-'))
})
after(async () => {
  rmSync(scratch, { recursive: true, force: true })
  await daemon?.stop()
})

test('the sandbox: debug mode names no control plane; through the router, the run\'s', () => {
  assert.equal(sbx.sandboxId, ROUTED ? process.env.SANDBOXD_E2B_SANDBOX_ID : 'debug_sandbox_id')
})

test('run: stdout, stderr, exit code', async () => {
  const r = await sbx.commands.run('echo out; echo err >&2')
  assert.deepEqual([r.stdout, r.stderr, r.exitCode], ['out\n', 'err\n', 0])
})

test('run: a failing command is CommandExitError', async () => {
  await assert.rejects(sbx.commands.run('echo gone >&2; exit 3'), (e) => {
    assert.ok(e instanceof CommandExitError, e)
    assert.equal(e.exitCode, 3)
    assert.equal(e.stderr, 'gone\n')
    return true
  })
})

test('run: envs and cwd', async () => {
  const r = await sbx.commands.run('echo $FOO; pwd', { envs: { FOO: 'bar baz' }, cwd: scratch })
  assert.equal(r.stdout, `bar baz\n${scratch}\n`)
})

test('run: a missing cwd is InvalidArgumentError', async () => {
  await assert.rejects(sbx.commands.run('true', { cwd: '/no-such-dir' }),
    (e) => e instanceof InvalidArgumentError && /no-such-dir/.test(e.message))
})

test('run: onStdout and onStderr see the output as it comes', async () => {
  const out = []
  const err = []
  await sbx.commands.run('echo a; echo b >&2; echo c', { onStdout: (d) => out.push(d), onStderr: (d) => err.push(d) })
  assert.equal(out.join(''), 'a\nc\n')
  assert.equal(err.join(''), 'b\n')
})

test('run: timeoutMs is TimeoutError and the process is killed', async () => {
  const marker = join(scratch, 'timeout-pid')
  // 3 s: bash -l alone takes a quarter of a second here, more on a loaded machine.
  await assert.rejects(sbx.commands.run(`echo $$ > ${marker}; exec sleep 30`, { timeoutMs: 3000 }),
    (e) => e instanceof TimeoutError)
  const pid = Number(readFileSync(marker, 'utf8'))
  await waitUntil(() => !procExists(pid), 10_000, `process ${pid} to die`)
})

test('run: background + sendStdin + wait', async () => {
  const h = await sbx.commands.run('read x; echo got $x', { background: true, stdin: true })
  assert.ok(h.pid > 0)
  await sbx.commands.sendStdin(h.pid, 'it\n')
  const r = await h.wait()
  assert.deepEqual([r.stdout, r.exitCode], ['got it\n', 0])
})

test('stdin: strings and bytes, closeStdin, handle.sendStdin', async () => {
  const h = await sbx.commands.run('cat; echo done', { background: true, stdin: true })
  await sbx.commands.sendStdin(h.pid, 'one\n')
  await sbx.commands.sendStdin(h.pid, new TextEncoder().encode('two\n'))
  await h.sendStdin('three\n')
  await sbx.commands.closeStdin(h.pid)
  assert.equal((await h.wait()).stdout, 'one\ntwo\nthree\ndone\n')
})

test('stdin off: the command reads EOF', async () => {
  assert.equal((await sbx.commands.run('cat; echo eof')).stdout, 'eof\n')
})

test('list and kill', async () => {
  const h = await sbx.commands.run('sleep 30', { background: true, timeoutMs: 0 })
  const procs = new Map((await sbx.commands.list()).map((p) => [p.pid, p]))
  assert.ok(procs.has(h.pid))
  assert.equal(procs.get(h.pid).cmd, '/bin/bash')
  assert.deepEqual(procs.get(h.pid).args, ['-l', '-c', 'sleep 30'])
  assert.equal(await sbx.commands.kill(h.pid), true)
  await assert.rejects(h.wait(), (e) => e instanceof CommandExitError && e.exitCode === -1)
  assert.ok(!(await sbx.commands.list()).some((p) => p.pid === h.pid))
})

test('list shows envs and cwd as Start was given them', async () => {
  const h = await sbx.commands.run('sleep 30', {
    background: true, timeoutMs: 0, cwd: scratch, envs: { A_VAR: 'a value=with =', EMPTY: '' },
  })
  const plain = await sbx.commands.run('sleep 30', { background: true, timeoutMs: 0 })
  try {
    const procs = new Map((await sbx.commands.list()).map((p) => [p.pid, p]))
    assert.deepEqual(procs.get(h.pid).envs, { A_VAR: 'a value=with =', EMPTY: '' })
    assert.equal(procs.get(h.pid).cwd, scratch)
    assert.deepEqual(procs.get(plain.pid).envs, {})
    assert.equal(procs.get(plain.pid).cwd, undefined) // none asked for: unset, as envd's
  } finally {
    assert.equal(await h.kill(), true)
    assert.equal(await plain.kill(), true)
  }
})

test('handle.kill; kill of an unknown pid is false', async () => {
  const h = await sbx.commands.run('sleep 30', { background: true, timeoutMs: 0 })
  assert.equal(await h.kill(), true)
  await assert.rejects(h.wait(), (e) => e instanceof CommandExitError)
  assert.equal(await sbx.commands.kill(UNKNOWN_PID), false)
})

test('kill takes the whole tree', async () => {
  const marker = join(scratch, 'child-pid')
  const h = await sbx.commands.run(`sleep 30 & echo $! > ${marker}; wait`, { background: true, timeoutMs: 0 })
  const child = await waitUntil(() => existsSync(marker) && Number(readFileSync(marker, 'utf8')), 10_000, 'the child')
  assert.equal(await sbx.commands.kill(h.pid), true)
  await assert.rejects(h.wait(), (e) => e instanceof CommandExitError)
  await waitUntil(() => !procExists(child), 10_000, 'the background child to die')
})

test('connect to a running command: output from then on', async () => {
  const h = await sbx.commands.run('while read x; do echo seen $x; done', { background: true, stdin: true, timeoutMs: 0 })
  await sbx.commands.sendStdin(h.pid, 'before\n')
  const seen = []
  const h2 = await sbx.commands.connect(h.pid, { onStdout: (d) => seen.push(d) })
  assert.equal(h2.pid, h.pid)
  await sbx.commands.sendStdin(h.pid, 'after\n')
  await sbx.commands.closeStdin(h.pid)
  const r2 = await h2.wait()
  assert.match(r2.stdout, /seen after\n/)
  assert.match(seen.join(''), /seen after\n/)
  assert.equal((await h.wait()).stdout, 'seen before\nseen after\n')
})

test('disconnect leaves the command running; connect again and wait', async () => {
  const h = await sbx.commands.run('read x; echo got $x', { background: true, stdin: true, timeoutMs: 0 })
  await h.disconnect()
  assert.ok((await sbx.commands.list()).some((p) => p.pid === h.pid))
  const h2 = await sbx.commands.connect(h.pid)
  await sbx.commands.sendStdin(h.pid, 'back\n')
  const r = await h2.wait()
  assert.deepEqual([r.stdout, r.exitCode], ['got back\n', 0])
})

test('connect with timeoutMs: TimeoutError, the command goes on', async () => {
  const h = await sbx.commands.run('sleep 30', { background: true, timeoutMs: 0 })
  try {
    const h2 = await sbx.commands.connect(h.pid, { timeoutMs: 500 })
    await assert.rejects(h2.wait(), (e) => e instanceof TimeoutError)
    assert.ok((await sbx.commands.list()).some((p) => p.pid === h.pid))
  } finally {
    await h.kill()
  }
})

test('an aborted run (signal) ends the call, not the command', async () => {
  const marker = join(scratch, 'aborted-done')
  const ac = new AbortController()
  // Aborted once it has surely started: at its first output.
  const run = sbx.commands.run(`echo started; sleep 1; echo done > ${marker}`,
    { signal: ac.signal, onStdout: () => ac.abort() })
  await assert.rejects(run)
  await waitUntil(() => existsSync(marker), 10_000, 'the command to finish on its own')
})

test('sendStdin of 16 MiB in one call goes whole (one SendInput message, base64 in JSON)', async () => {
  const h = await sbx.commands.run('wc -c', { background: true, stdin: true })
  await h.sendStdin('x'.repeat(16 << 20))
  await h.closeStdin()
  assert.equal((await h.wait()).stdout.trim(), String(16 << 20))
})

// On a daemon of its own with a small bound: past the default 32 MiB the SDK's JSON encoding
// alone takes seconds (test/e2b checks that one with the Python SDK).
test('sendStdin past --e2b-max-message-bytes: RateLimitError (resource_exhausted)', { skip: OWN_DAEMON }, async () => {
  const small = await Daemon.start(['--e2b-max-message-bytes', String(1 << 20)])
  try {
    const h = await (await small.sandbox()).commands.run('wc -c', { background: true, stdin: true })
    await assert.rejects(h.sendStdin('x'.repeat(800 << 10)), // 1.04 MiB of message
      (e) => e instanceof e2b.RateLimitError && /larger than the limit/.test(e.message))
    await h.sendStdin('x'.repeat(700 << 10))
    await h.closeStdin()
    assert.equal((await h.wait()).stdout.trim(), String(700 << 10))
  } finally {
    await small.stop()
  }
})

test('sendStdin is answered once the process has the bytes: one that does not read holds it', async () => {
  const h = await sbx.commands.run('sleep 30', { background: true, stdin: true, timeoutMs: 0 })
  try {
    // 1 MiB: more than a pipe holds, as envd's write to the pipe would wait.
    await assert.rejects(sbx.commands.sendStdin(h.pid, 'x'.repeat(1 << 20), { requestTimeoutMs: 1000 }),
      (e) => e instanceof TimeoutError)
  } finally {
    assert.equal(await h.kill(), true)
  }
})

test('connect to an unknown pid is NotFoundError', async () => {
  await assert.rejects(sbx.commands.connect(UNKNOWN_PID), (e) => e instanceof NotFoundError)
})

test('sendStdin to an unknown pid is NotFoundError', async () => {
  await assert.rejects(sbx.commands.sendStdin(UNKNOWN_PID, 'x'), (e) => e instanceof NotFoundError)
})

test('an unknown user is AuthenticationError', async () => {
  await assert.rejects(sbx.commands.run('true', { user: 'nosuchuser' }),
    (e) => e instanceof AuthenticationError && /nosuchuser/.test(e.message))
})

test('user switch', { skip: process.getuid() !== 0 && 'switching users needs root' }, async () => {
  const r = await sbx.commands.run('id -un; echo $HOME; echo $USER', { user: 'nobody', cwd: '/' })
  const lines = r.stdout.split('\n')
  assert.equal(lines[0], 'nobody')
  assert.equal(lines[2], 'nobody')
})

test('pty: create, resize, sendInput, wait', async () => {
  const out = []
  const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => out.push(Buffer.from(d)) })
  assert.ok(pty.pid > 0)
  await sbx.pty.resize(pty.pid, { cols: 101, rows: 33 })
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; exit 7\n'))
  await assert.rejects(pty.wait(), (e) => e instanceof CommandExitError && e.exitCode === 7)
  assert.match(Buffer.concat(out).toString(), /33 101/)
})

test('pty: cwd, envs, user; connect to it', async () => {
  const out = []
  const pty = await sbx.pty.create({
    cols: 80, rows: 24, cwd: scratch, envs: { ZZ: 'zz' }, timeoutMs: 0, onData: () => {},
    ...(process.getuid() === 0 ? { user: 'nobody' } : {}),
  })
  const again = await sbx.pty.connect(pty.pid, { onData: (d) => out.push(Buffer.from(d)) })
  assert.equal(again.pid, pty.pid)
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('echo "<$ZZ $(pwd) $(id -un) $TERM>"; exit 0\n'))
  assert.equal((await again.wait()).exitCode, 0)
  const user = process.getuid() === 0 ? 'nobody' : (await sbx.commands.run('id -un')).stdout.trim()
  assert.match(Buffer.concat(out).toString(), new RegExp(`<zz ${scratch} ${user} xterm-256color>`))
})

test('pty: resize of a command without a terminal is failed_precondition; unknown pids NotFoundError', async () => {
  const h = await sbx.commands.run('sleep 30', { background: true, timeoutMs: 0 })
  try {
    await assert.rejects(sbx.pty.resize(h.pid, { cols: 10, rows: 10 }),
      (e) => e instanceof e2b.SandboxError && /failed_precondition/.test(e.message))
  } finally {
    await h.kill()
  }
  await assert.rejects(sbx.pty.resize(UNKNOWN_PID, { cols: 10, rows: 10 }), (e) => e instanceof NotFoundError)
  await assert.rejects(sbx.pty.sendInput(UNKNOWN_PID, new Uint8Array([65])), (e) => e instanceof NotFoundError)
})

test('pty: kill', async () => {
  const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {}, timeoutMs: 0 })
  assert.equal(await sbx.pty.kill(pty.pid), true)
  await assert.rejects(pty.wait(), (e) => e instanceof CommandExitError)
  assert.equal(await sbx.pty.kill(pty.pid), false)
})

test('many runs leave nothing behind', async () => {
  for (let i = 0; i < 20; i++) assert.equal((await sbx.commands.run(`echo ${i}`)).stdout, `${i}\n`)
  assert.deepEqual(await sbx.commands.list(), [])
})

test('a large output comes whole', async () => {
  const r = await sbx.commands.run("head -c 3000000 /dev/zero | tr '\\0' x")
  assert.equal(r.stdout.length, 3_000_000)
  assert.ok(/^x+$/.test(r.stdout))
})

test('commands in parallel, each with its own stdin and output', async () => {
  const runs = Array.from({ length: 16 }, async (_, i) => {
    const h = await sbx.commands.run(`cat; echo end ${i} >&2`, { background: true, stdin: true })
    await h.sendStdin(`in ${i}\n`)
    await h.closeStdin()
    const r = await h.wait()
    assert.equal(r.stdout, `in ${i}\n`)
    // The end of stderr: bash -l runs the machine's profile, whose tools (pyenv's rehash) may
    // complain when 16 login shells start at once.
    assert.ok(r.stderr.endsWith(`end ${i}\n`), r.stderr)
  })
  await Promise.all(runs)
})

test('the daemon is still up', async () => {
  assert.ok(await stillUp(daemon, sbx))
})
