// The Sandbox object of the unmodified e2b JavaScript SDK: against sandboxd's E2B port, what it
// does without a control plane (debug mode), /health, and the access token; through the router,
// what the control plane answers of the run's sandbox (getInfo, setTimeout, list) and envd's
// token checked by the sandboxd behind it.

import assert from 'node:assert/strict'
import { existsSync, readFileSync } from 'node:fs'
import { after, before, test } from 'node:test'

import { Daemon, OWN_DAEMON, ROUTED, e2b } from './harness.mjs'

const { AuthenticationError, Sandbox } = e2b
const ONLY_ROUTED = !ROUTED && 'needs a control plane (SANDBOXD_E2B_TEMPLATE)'

let daemon, tokened
before(async () => {
  if (!ROUTED) daemon = await Daemon.start()
})
after(async () => {
  await daemon?.stop()
  await tokened?.stop()
})

test('the SDK under test is the pinned one', () => {
  const pkg = JSON.parse(readFileSync(new URL('./package.json', import.meta.url), 'utf8'))
  assert.equal(e2b.version, pkg.dependencies.e2b)
})

test('E2B_DEBUG and E2B_SANDBOX_URL from the environment reach the port', { skip: OWN_DAEMON }, async () => {
  process.env.E2B_DEBUG = 'true'
  process.env.E2B_SANDBOX_URL = daemon.url
  try {
    const sbx = await Sandbox.create()
    assert.equal((await sbx.commands.run('echo env')).stdout, 'env\n')
  } finally {
    delete process.env.E2B_DEBUG
    delete process.env.E2B_SANDBOX_URL
  }
})

test('Sandbox.connect in debug mode, isRunning (/health)', { skip: OWN_DAEMON }, async () => {
  const sbx = await Sandbox.connect('anyid', { debug: true, sandboxUrl: daemon.url })
  assert.equal(sbx.sandboxId, 'anyid')
  assert.equal(await sbx.isRunning(), true)
  assert.equal((await sbx.commands.run('echo hi')).stdout, 'hi\n')
})

test('a daemon with a token: calls without it are AuthenticationError', { skip: OWN_DAEMON }, async () => {
  tokened = await Daemon.start([], { SANDBOXD_TOKEN: 's3cret-token' })
  const sbx = await tokened.sandbox()
  const auth = (e) => e instanceof AuthenticationError
  await assert.rejects(sbx.commands.run('true'), auth)
  await assert.rejects(sbx.commands.list(), auth)
  await assert.rejects(sbx.files.read('/etc/hostname'), auth)
  await assert.rejects(sbx.files.write('/tmp/never-written-e2b-js', 'x'), auth)
  assert.equal(existsSync('/tmp/never-written-e2b-js'), false)
  await assert.rejects(sbx.files.list('/'), auth)
  assert.equal(await sbx.isRunning(), true) // /health needs no token, as envd's
})

test('through the router: getInfo, setTimeout, list', { skip: ONLY_ROUTED }, async () => {
  const id = process.env.SANDBOXD_E2B_SANDBOX_ID
  const sbx = await Sandbox.connect(id)
  // The form under test: the router's shared host, or the sandbox's own https host.
  const { E2B_SANDBOX_URL: shared, E2B_DOMAIN: domain } = process.env
  assert.equal(sbx.envdApiUrl, shared || `https://${sbx.envdPort}-${id}.${domain}`)
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, id)
  assert.equal(info.templateId, ROUTED)
  assert.equal(info.state, 'running')
  await sbx.setTimeout(900_000)
  const left = (await Sandbox.getInfo(id)).endAt.getTime() - Date.now()
  assert.ok(left > 880_000 && left <= 901_000, `${left} ms left`)
  const listed = await Sandbox.list().nextItems()
  assert.ok(listed.some((s) => s.sandboxId === id), JSON.stringify(listed))
  assert.equal(await sbx.isRunning(), true)
  assert.equal((await sbx.commands.run('echo routed')).stdout, 'routed\n')
})

test('through the router: a wrong envd access token is AuthenticationError', { skip: ONLY_ROUTED }, async () => {
  const sbx = await Sandbox.connect(process.env.SANDBOXD_E2B_SANDBOX_ID)
  // The SDK's own way to make a handle, with every field as connect gave it but the token.
  const wrong = new Sandbox({
    ...sbx.connectionConfig, sandboxId: sbx.sandboxId, sandboxDomain: sbx.sandboxDomain,
    envdVersion: sbx.envdApi.version, envdAccessToken: 'wrong',
  })
  const auth = (e) => e instanceof AuthenticationError
  await assert.rejects(wrong.commands.run('true'), auth)
  await assert.rejects(wrong.files.read('/etc/hostname'), auth)
  await assert.rejects(wrong.files.list('/'), auth)
})
