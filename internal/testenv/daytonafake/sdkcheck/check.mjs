// check.mjs drives the fake Daytona with Daytona's own TypeScript SDK
// (@daytonaio/sdk, the version package.json pins): create, execute,
// upload and download, stop and start, delete. It prints one line
// "ok <step>" per step that did what the SDK documents, and exits 1 with
// "FAIL <step>: <why>" at the first that did not. The Go test in this
// directory runs it (go test ./internal/testenv/daytonafake/sdkcheck).
//
// Environment: DAYTONA_API_URL, DAYTONA_API_KEY (the fake's), and
// SDKCHECK_IMAGE, an image the fake has locally.
import { Daytona } from '@daytonaio/sdk'

const image = process.env.SDKCHECK_IMAGE
const daytona = new Daytona({ apiUrl: process.env.DAYTONA_API_URL, apiKey: process.env.DAYTONA_API_KEY, target: 'us' })
let sandbox
let step = 'start'

function check(cond, why) {
  if (!cond) throw new Error(why)
}

async function run() {
  step = 'create'
  sandbox = await daytona.create({ snapshot: image, labels: { sdkcheck: '1' } }, { timeout: 120 })
  check(sandbox.state === 'started', `state ${sandbox.state}, want started`)
  console.log('ok create', sandbox.id)

  step = 'execute'
  let r = await sandbox.process.executeCommand("sh -c 'echo $((6*7)); echo out-$HOME | tr a-z A-Z'")
  check(r.exitCode === 0, `exit ${r.exitCode}`)
  const lines = r.result.trim().split('\n')
  check(lines.length === 2 && lines[0] === '42' && lines[1].startsWith('OUT-/'), `result ${JSON.stringify(r.result)}`)
  // Through the user's shell (the current daemon) a bare expansion is
  // done; split on quotes (daemons before March 2026) it is not. Either
  // is Daytona: say which.
  r = await sandbox.process.executeCommand('echo $((1+1))')
  console.log('ok execute', r.result.trim() === '2' ? 'through a shell' : 'split on quotes')
  r = await sandbox.process.executeCommand("sh -c 'exit 3'")
  check(r.exitCode === 3, `exit ${r.exitCode}, want 3`)
  r = await sandbox.process.executeCommand('pwd', '/tmp')
  check(r.result.trim() === '/tmp', `cwd ${JSON.stringify(r.result)}`)
  console.log('ok execute-exit-and-cwd')

  step = 'home'
  const home = await sandbox.getUserHomeDir()
  check(typeof home === 'string' && home.startsWith('/'), `home ${home}`)
  console.log('ok home', home)

  step = 'upload'
  const data = Buffer.from('bytes from the SDK \u00e9\n\x00\x01end')
  await sandbox.fs.uploadFile(data, '/tmp/sdkcheck/in.bin')
  r = await sandbox.process.executeCommand('wc -c /tmp/sdkcheck/in.bin')
  check(r.result.trim().startsWith(String(data.length)), `size after upload: ${JSON.stringify(r.result)}`)
  console.log('ok upload')

  step = 'download'
  const back = await sandbox.fs.downloadFile('/tmp/sdkcheck/in.bin')
  check(Buffer.compare(Buffer.from(back), data) === 0, `downloaded ${JSON.stringify(Buffer.from(back).toString())}`)
  console.log('ok download')

  step = 'stop'
  await sandbox.stop(120)
  await sandbox.refreshData()
  check(sandbox.state === 'stopped', `state ${sandbox.state}, want stopped`)
  console.log('ok stop')

  step = 'start'
  await sandbox.start(120)
  check(sandbox.state === 'started', `state ${sandbox.state}, want started`)
  r = await sandbox.process.executeCommand('cat /tmp/sdkcheck/in.bin')
  check(r.result.startsWith('bytes from the SDK'), `file after stop and start: ${JSON.stringify(r.result)}`)
  console.log('ok start')

  step = 'delete'
  await sandbox.delete(120)
  let gone = false
  for (const deadline = Date.now() + 60000; !gone && Date.now() < deadline; ) {
    try {
      const s = await daytona.get(sandbox.id)
      check(['destroying', 'destroyed'].includes(s.state), `state ${s.state} after delete`)
      await new Promise((ok) => setTimeout(ok, 100))
    } catch (e) {
      if (e && e.statusCode === 404) gone = true
      else throw e
    }
  }
  check(gone, 'the sandbox is still there a minute after delete')
  sandbox = undefined
  console.log('ok delete')
}

try {
  await run()
  console.log('ok all')
  process.exit(0)
} catch (e) {
  console.log(`FAIL ${step}: ${e && e.stack ? e.stack : e}`)
  if (sandbox) {
    try { await sandbox.delete(60) } catch { /* the test's fake removes it anyway */ }
  }
  process.exit(1)
}
