// h2c on the E2B port with a real Connect client: @connectrpc/connect-node's transport over
// HTTP/2 with prior knowledge (httpVersion "2" speaks nothing else on http://), in JSON and in
// binary protobuf. The services are built at run time from a descriptor set of proto/e2b (protoc)
// with @bufbuild/protobuf's registry: no generated code, the protos the daemon serves. Start
// (server stream), StreamInput (client stream), List, SendSignal, CloseStdin, Stat, ListDir.

import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, test } from 'node:test'
import { fileURLToPath, pathToFileURL } from 'node:url'

import { Daemon, OWN_DAEMON } from './harness.mjs'

// The pinned packages, as ES modules from the cache run-tests.sh fills (one copy of each, so the
// registry's descriptors are the ones connect's codecs know).
async function load(pkg, entry = 'dist/esm/index.js') {
  const modules = process.env.E2B_JS_MODULES
  if (!modules) throw new Error('E2B_JS_MODULES is not set: run the tests through run-tests.sh')
  return import(pathToFileURL(join(modules, pkg, entry)).href)
}
const { createFileRegistry, fromBinary } = await load('@bufbuild/protobuf')
const { FileDescriptorSetSchema } = await load('@bufbuild/protobuf', 'dist/esm/wkt/index.js')
const { createClient, ConnectError, Code } = await load('@connectrpc/connect')
const { createConnectTransport } = await load('@connectrpc/connect-node')

function registry() {
  const protoDir = fileURLToPath(new URL('../../proto/e2b', import.meta.url))
  const tmp = mkdtempSync(join(tmpdir(), 'e2b-h2c-'))
  const out = join(tmp, 'e2b.pb')
  try {
    execFileSync('protoc', ['--include_imports', `--descriptor_set_out=${out}`, `-I${protoDir}`,
      'process/process.proto', 'filesystem/filesystem.proto'])
    return createFileRegistry(fromBinary(FileDescriptorSetSchema, readFileSync(out)))
  } finally {
    rmSync(tmp, { recursive: true, force: true })
  }
}

const reg = registry()
const Process = reg.getService('process.Process')
const Filesystem = reg.getService('filesystem.Filesystem')

let daemon
// Raw Connect to a daemon of its own: nothing here goes through the router.
before(async () => {
  if (!OWN_DAEMON) daemon = await Daemon.start()
})
after(async () => {
  await daemon?.stop()
})

function clients(useBinaryFormat) {
  const transport = createConnectTransport({
    httpVersion: '2', baseUrl: daemon.url, useBinaryFormat,
  })
  return { proc: createClient(Process, transport), fs: createClient(Filesystem, transport) }
}

async function collect(stream) {
  const events = []
  for await (const res of stream) events.push(res.event.event)
  return events
}

for (const binary of [false, true]) {
  const codec = binary ? 'binary protobuf' : 'JSON'

  test(`Start streams output and the end over h2c (${codec})`, { skip: OWN_DAEMON }, async () => {
    const { proc } = clients(binary)
    const events = await collect(proc.start({
      process: { cmd: '/bin/sh', args: ['-c', 'echo out; echo err >&2; exit 4'] },
    }))
    assert.equal(events[0].case, 'start')
    assert.ok(events[0].value.pid > 0)
    const data = events.filter((e) => e.case === 'data').map((e) => e.value.output)
    const text = (k) =>
      Buffer.concat(data.filter((o) => o.case === k).map((o) => o.value)).toString()
    assert.equal(text('stdout'), 'out\n')
    assert.equal(text('stderr'), 'err\n')
    const end = events.at(-1)
    assert.equal(end.case, 'end')
    assert.equal(end.value.exitCode, 4)
  })

  test(`List shows a running process over h2c (${codec})`, { skip: OWN_DAEMON }, async () => {
    const { proc } = clients(binary)
    const tag = `h2c-list-${binary}`
    const ac = new AbortController()
    const stream = proc.start({ process: { cmd: '/bin/sleep', args: ['30'] }, tag },
      { signal: ac.signal })
    const it = stream[Symbol.asyncIterator]()
    const first = await it.next()
    assert.equal(first.value.event.event.case, 'start')
    const pid = first.value.event.event.value.pid
    const list = await proc.list({})
    const p = list.processes.find((x) => x.tag === tag)
    assert.ok(p, 'the process is not listed')
    assert.equal(p.pid, pid)
    assert.equal(p.config.cmd, '/bin/sleep')
    await proc.sendSignal({ process: { selector: { case: 'pid', value: pid } }, signal: 9 })
    ac.abort()
    await it.return?.()
  })

  test(`StreamInput, a client stream, feeds a process over h2c (${codec})`, { skip: OWN_DAEMON }, async () => {
    const { proc } = clients(binary)
    const it = proc.start({ process: { cmd: '/bin/cat' }, stdin: true })[Symbol.asyncIterator]()
    const first = await it.next()
    assert.equal(first.value.event.event.case, 'start')
    const pid = first.value.event.event.value.pid
    const enc = new TextEncoder()
    const process = { selector: { case: 'pid', value: pid } }
    async function* input() {
      yield { event: { case: 'start', value: { process } } }
      for (const line of ['one\n', 'two\n']) {
        const stdin = { case: 'stdin', value: enc.encode(line) }
        yield { event: { case: 'data', value: { input: { input: stdin } } } }
      }
    }
    await proc.streamInput(input())
    await proc.closeStdin({ process })
    const events = [first.value.event.event]
    for (let r = await it.next(); !r.done; r = await it.next()) events.push(r.value.event.event)
    const out = Buffer.concat(events
      .filter((e) => e.case === 'data' && e.value.output.case === 'stdout')
      .map((e) => e.value.output.value)).toString()
    assert.equal(out, 'one\ntwo\n')
    assert.equal(events.at(-1).case, 'end')
    assert.equal(events.at(-1).value.exitCode, 0)
  })

  test(`filesystem Stat and ListDir over h2c (${codec})`, { skip: OWN_DAEMON }, async () => {
    const { fs } = clients(binary)
    const st = await fs.stat({ path: '/tmp' })
    assert.equal(st.entry.path, '/tmp')
    assert.equal(st.entry.type, 2) // FILE_TYPE_DIRECTORY
    const ls = await fs.listDir({ path: '/', depth: 1 })
    assert.ok(ls.entries.some((e) => e.path === '/tmp'))
    await assert.rejects(fs.stat({ path: '/no-such-path' }),
      (e) => e instanceof ConnectError && e.code === Code.NotFound)
  })
}
