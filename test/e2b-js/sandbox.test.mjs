// The Sandbox object of the unmodified e2b JavaScript SDK against sandboxd's E2B port: what it
// does without a control plane (debug mode), /health, and the access token.

import assert from 'node:assert/strict'
import { existsSync, readFileSync } from 'node:fs'
import { after, before, test } from 'node:test'

import { Daemon, e2b } from './harness.mjs'

const { AuthenticationError, Sandbox } = e2b

let daemon, tokened
before(async () => {
  daemon = await Daemon.start()
})
after(async () => {
  await daemon?.stop()
  await tokened?.stop()
})

test('the SDK under test is the pinned one', () => {
  const pkg = JSON.parse(readFileSync(new URL('./package.json', import.meta.url), 'utf8'))
  assert.equal(e2b.version, pkg.dependencies.e2b)
})

test('E2B_DEBUG and E2B_SANDBOX_URL from the environment reach the port', async () => {
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

test('Sandbox.connect in debug mode, isRunning (/health)', async () => {
  const sbx = await Sandbox.connect('anyid', { debug: true, sandboxUrl: daemon.url })
  assert.equal(sbx.sandboxId, 'anyid')
  assert.equal(await sbx.isRunning(), true)
  assert.equal((await sbx.commands.run('echo hi')).stdout, 'hi\n')
})

test('a daemon with a token: calls without it are AuthenticationError', async () => {
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
