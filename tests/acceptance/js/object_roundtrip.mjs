// Drives the queue with the official JavaScript client (npm `taskcluster-client`), as a worker and a downloader
// built on it would: createTask, claimWork, an `object` artifact uploaded with the client's `upload` helper,
// finishArtifact, reportCompleted, then `downloadArtifact`. Prints one JSON line with what it saw.
//
// Environment: TC_CLIENT (path of the client's src/index.js), ROOT_URL, CLIENT_ID, ACCESS_TOKEN, TASK_QUEUE_ID,
// SIZE (bytes of the artifact).
import { Readable, Writable } from 'node:stream';
import { pathToFileURL } from 'node:url';

const tc = (await import(pathToFileURL(process.env.TC_CLIENT).href)).default;  // clients, helpers, slugid
const rootUrl = process.env.ROOT_URL;
const credentials = { clientId: process.env.CLIENT_ID, accessToken: process.env.ACCESS_TOKEN };
const taskQueueId = process.env.TASK_QUEUE_ID;
const size = Number(process.env.SIZE);

const queue = new tc.Queue({ rootUrl, credentials, retries: 0 });
const taskId = tc.slugid();
const now = Date.now();
await queue.createTask(taskId, {
  taskQueueId,
  schedulerId: 'js-client-test',
  taskGroupId: taskId,
  created: new Date(now).toJSON(),
  deadline: new Date(now + 3600e3).toJSON(),
  expires: new Date(now + 2 * 86400e3).toJSON(),
  payload: {},
  metadata: { name: 'js', description: 'official JS client', owner: 'js@example.com', source: 'https://example.com/js' },
});

const claimed = await queue.claimWork(taskQueueId, { tasks: 1, workerGroup: 'js-group', workerId: 'js-worker' });
const claim = claimed.tasks[0];
const runId = claim.runId;
const worker = new tc.Queue({ rootUrl, credentials: claim.credentials, retries: 0 });

const data = Buffer.alloc(size);
for (let i = 0; i < size; i++) data[i] = (i * 31 + 7) % 251;
const name = 'public/js/data.bin';
const created = await worker.createArtifact(taskId, runId, name, {
  storageType: 'object',
  expires: new Date(now + 86400e3).toJSON(),
  contentType: 'application/octet-stream',
});
const object = new tc.Object({ rootUrl, credentials: created.credentials, retries: 0 });
await tc.upload({
  projectId: created.projectId,
  name: created.name,
  contentType: 'application/octet-stream',
  contentLength: size,
  expires: created.expires,
  uploadId: created.uploadId,
  object,
  streamFactory: async () => Readable.from([data]),
  retries: 0,
});
await worker.finishArtifact(taskId, runId, name, { uploadId: created.uploadId });
await worker.reportCompleted(taskId, runId);

const chunks = [];
const contentType = await tc.downloadArtifact({
  taskId, runId, name, queue: new tc.Queue({ rootUrl, retries: 0 }), retries: 0,
  streamFactory: async () => new Writable({ write(chunk, _encoding, done) { chunks.push(chunk); done(); } }),
});
const downloaded = Buffer.concat(chunks);
const status = await queue.status(taskId);
console.log(JSON.stringify({
  taskId,
  objectName: created.name,
  state: status.status.state,
  contentType,
  same: downloaded.equals(data),
  downloadedBytes: downloaded.length,
}));
