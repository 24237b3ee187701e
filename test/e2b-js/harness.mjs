// What the test files share: the pinned e2b SDK from the cache run-tests.sh fills, the sandbox
// under test (a real sandboxd with its E2B port on, or one made through a control plane), and
// bounded waits.
//
// The same tests run through the router and E2B's control plane when SANDBOXD_E2B_TEMPLATE is
// set (test/controller/test_e2b_sdk.py does that, as for test/e2b): run-tests.sh creates one
// sandbox of that template with Sandbox.create (E2B_API_URL, E2B_API_KEY) unless
// SANDBOXD_E2B_SANDBOX_ID names one already, each test file connects to it, and its envd calls go
// where E2B_SANDBOX_URL (the router's shared host) or E2B_DOMAIN (https://<port>-<id>.<domain>)
// says; the tests that talk to a sandboxd of their own skip.
//
// Environment: SANDBOXD_BIN (our daemon), SANDBOXD_SANITIZED (ON under ASan: longer waits),
// E2B_JS_MODULES (the node_modules that holds the pinned SDK), SANDBOXD_E2B_TEMPLATE and
// SANDBOXD_E2B_SANDBOX_ID (through the router).

import { spawn } from 'node:child_process'
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, closeSync, accessSync, constants } from 'node:fs'
import { createRequire } from 'node:module'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { pathToFileURL } from 'node:url'

export const ROUTED = process.env.SANDBOXD_E2B_TEMPLATE || ''
// A test's `skip` when it needs a sandboxd of its own (its log, its flags, its token).
export const OWN_DAEMON = ROUTED ? 'talks to a sandboxd of its own, not through the router' : false
export const SANITIZED = ['ON', '1', 'TRUE'].includes((process.env.SANDBOXD_SANITIZED || 'OFF').toUpperCase())
const START_TIMEOUT_MS = SANITIZED ? 30_000 : 10_000
const E2B_LISTENING = /e2b listening on 127\.0\.0\.1 port (\d+)/

// The SDK's ES module, loaded from the cache (it is not installed in the repo).
async function loadSdk() {
  const modules = process.env.E2B_JS_MODULES
  if (!modules) throw new Error('E2B_JS_MODULES is not set: run the tests through run-tests.sh')
  const req = createRequire(join(modules, '..', 'package.json'))
  const pkgPath = req.resolve('e2b/package.json')
  const pkg = JSON.parse(readFileSync(pkgPath, 'utf8'))
  return { version: pkg.version, ...(await import(pathToFileURL(join(dirname(pkgPath), pkg.module)).href)) }
}
export const e2b = await loadSdk()

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// Polls fn until it returns something truthy; fails after ms, saying what it waited for
// (what: a string, or a function giving one then).
export async function waitUntil(fn, ms, what) {
  const deadline = Date.now() + ms
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${typeof what === 'function' ? what() : what}`)
    await sleep(20)
  }
}

// A TCP port free on 127.0.0.1 now (another process may take it before the daemon does).
function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => resolve(port))
    })
  })
}

// A sandboxd with --e2b-port, its log in a file; stopped with SIGTERM, which it must obey.
// extraEnv: SANDBOXD_TOKEN to have it check X-Access-Token.
export class Daemon {
  static async start(extra = [], extraEnv = {}) {
    const bin = process.env.SANDBOXD_BIN || ''
    try {
      accessSync(bin, constants.X_OK)
    } catch {
      throw new Error(`sandboxd binary not found at '${bin}' (set SANDBOXD_BIN)`)
    }
    const d = new Daemon()
    d.tmp = mkdtempSync(join(tmpdir(), 'e2b-js-'))
    d.root = join(d.tmp, 'root')
    mkdirSync(d.root)
    d.logPath = join(d.tmp, 'sandboxd.log')
    const log = openSync(d.logPath, 'w')
    const env = { ...process.env }
    delete env.SANDBOXD_TOKEN
    Object.assign(env, extraEnv)
    const args = ['--listen-host', '127.0.0.1', '--grpc-port', '0', '--rest-port', '0',
      '--e2b-port', String(await freePort()), '--root-dir', d.root, '--shutdown-timeout', '5s', ...extra]
    d.proc = spawn(bin, args, { stdio: ['ignore', log, log], env })
    closeSync(log)
    d.exit = new Promise((resolve) => d.proc.once('exit', (code, signal) => resolve({ code, signal })))
    const m = await waitUntil(() => {
      if (d.proc.exitCode !== null) throw new Error(`sandboxd exited: ${d.logText()}`)
      return E2B_LISTENING.exec(d.logText())
    }, START_TIMEOUT_MS, 'the e2b port')
    d.port = Number(m[1])
    d.url = `http://127.0.0.1:${d.port}`
    return d
  }

  logText() {
    return readFileSync(this.logPath, 'utf8')
  }

  alive() {
    return this.proc.exitCode === null && this.proc.signalCode === null
  }

  async stop() {
    if (this.alive()) this.proc.kill('SIGTERM')
    let timer
    const timeout = new Promise((resolve) => { timer = setTimeout(() => resolve(null), START_TIMEOUT_MS) })
    const r = await Promise.race([this.exit, timeout])
    clearTimeout(timer)
    const log = this.logText()
    if (r === null) {
      this.proc.kill('SIGKILL')
      throw new Error('sandboxd did not stop on SIGTERM')
    }
    if (r.code !== 0) throw new Error(`sandboxd exited with ${r.code ?? r.signal}:\n${log.slice(-4000)}`)
    rmSync(this.tmp, { recursive: true, force: true })
  }

  // The SDK's Sandbox without a control plane: debug mode skips the API, sandboxUrl points
  // every envd call at our port (SDK 2.51 reads both, from options or E2B_DEBUG/E2B_SANDBOX_URL).
  sandbox(opts = {}) {
    return e2b.Sandbox.create({ debug: true, sandboxUrl: this.url, ...opts })
  }
}

// Does /proc/<pid> exist? (the daemon runs on this machine, so its processes are ours to see)
export function procExists(pid) {
  try {
    accessSync(`/proc/${pid}`)
    return true
  } catch {
    return false
  }
}

// The sandbox under test: { daemon, sbx }. Directly, a daemon of the file's own and the SDK in
// debug mode; through the router (ROUTED), the run's sandbox by Sandbox.connect, which asks the
// control plane for its envd access token, and no daemon.
export async function openSandbox() {
  if (ROUTED) {
    const id = process.env.SANDBOXD_E2B_SANDBOX_ID
    if (!id) throw new Error('SANDBOXD_E2B_SANDBOX_ID is not set: run the tests through run-tests.sh')
    return { daemon: null, sbx: await e2b.Sandbox.connect(id) }
  }
  const daemon = await Daemon.start()
  return { daemon, sbx: await daemon.sandbox() }
}

// Is the sandbox still answering? (its daemon alive, or /health through the router)
export async function stillUp(daemon, sbx) {
  return daemon ? daemon.alive() : sbx.isRunning()
}
