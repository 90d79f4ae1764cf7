// The shapes the inspector's JavaScript reads (JSDoc types in app/ name them; `tsc --checkJs --strict` holds them):
// the queue's answers as far as the inspector reads them (the schemas in the API reference have every field), and
// the inspector's own records. Declarations only: nothing here is served.

/** Taskcluster credentials as the sign-in keeps them (a temporary client's certificate as its JSON or object). */
interface Credentials {
  clientId: string;
  accessToken: string;
  certificate?: string | Record<string, unknown>;
}

/** A scope expression (auth's scope-expression schema): a scope, or AnyOf / AllOf of expressions. */
type ScopeExpression = string | { AnyOf: ScopeExpression[] } | { AllOf: ScopeExpression[] };

/** One run of a task-status answer. */
interface Run {
  runId: number;
  state: string;
  reasonCreated: string;
  reasonResolved?: string;
  workerGroup?: string;
  workerId?: string;
  takenUntil?: string;
  scheduled: string;
  started?: string;
  resolved?: string;
}

/** task-status.yml */
interface TaskStatus {
  taskId: string;
  provisionerId: string;
  workerType: string;
  taskQueueId: string;
  schedulerId: string;
  projectId: string;
  taskGroupId: string;
  priority: string;
  deadline: string;
  expires: string;
  retriesLeft: number;
  state: string;
  runs: Run[];
}

/** A task definition (task.yml), as far as the inspector reads it; the payload is the worker's. */
interface TaskDefinition {
  taskQueueId?: string;
  provisionerId?: string;
  workerType?: string;
  schedulerId: string;
  projectId?: string;
  taskGroupId: string;
  dependencies?: string[];
  requires?: string;
  routes?: string[];
  priority?: string;
  retries?: number;
  created: string;
  deadline: string;
  expires?: string;
  scopes?: string[];
  payload: any;
  metadata: { name: string; description: string; owner: string; source: string };
  tags?: Record<string, string>;
  extra?: any;
}

/** An entry of listTaskGroup (and of the inspector's group model). */
interface GroupEntry {
  task: TaskDefinition;
  status: TaskStatus;
}

/** An artifact of listArtifacts / listLatestArtifacts. */
interface Artifact {
  storageType: string;
  name: string;
  expires: string;
  contentType: string;
}

/** A push as listRecentTaskGroups (this queue's extension) answers it. */
interface Push {
  taskGroupId: string;
  schedulerId?: string;
  project?: string;
  revision?: string;
  created?: string;
  since?: string;
  sealed?: string | null;
  unresolved?: boolean;
  decisionTask?: { taskId?: string; name?: string; owner?: string; source?: string };
  counts?: {
    unresolved: number;
    failed: number;
    exception: number;
    rerunWaiting?: number;
    atLeast?: boolean;
  };
}

/** An ANSI style (ansi.js): set attributes only; PLAIN is the empty one. */
interface Style {
  bold?: boolean;
  dim?: boolean;
  italic?: boolean;
  underline?: boolean;
  inverse?: boolean;
  strike?: boolean;
  fg?: number | string;
  bg?: number | string;
}

/** A section a log marks (logmodel.js). */
interface LogSection {
  title: string;
  start: number;
  end: number | null;
  parent: number;
  name: string | null;
  hasError: boolean;
  /** Folded once when it closed (logview.js), so that a reader's unfolding stays. */
  folded?: boolean;
}

/** A search match in a log: its line (0-based) and the span of its plain text. */
interface LogMatch {
  line: number;
  start: number;
  end: number;
}

/** Lines of a log, 1-based, both included. */
interface LineRange {
  from: number;
  to: number;
}

/** What dom.js's h() and append() take as children: nodes, text (numbers as text), nothing, or lists of them. */
type Child = Node | string | number | boolean | null | undefined | readonly Child[];

/** What a view answers the router (inspector.js): how to stop its polling, follow a line anchor, or show another
 * filter or page of itself. */
interface View {
  stop?: () => void;
  anchor?: (anchor: string) => void;
  update?: (query: URLSearchParams) => void;
  now?: () => void;
}

/** The group's own fields, as each page of listTaskGroup carries them. */
interface GroupInfo {
  taskGroupId: string;
  schedulerId: string;
  projectId?: string;
  expires: string;
  sealed?: string | null;
}

/** Why a failed run failed (whyread.js): the log read (a reference's target: another run's artifact, maybe), the
 * worker's exit code, and its first error lines (their line numbers null when only the log's end was read). */
interface RunExplanation {
  taskId: string;
  runId: number;
  name: string;
  exitCode: string | null;
  errors: Array<{ n: number | null; line: string }>;
}

/** A task queue of listTaskQueues (with when a task was last created in it, as the home page merges them). */
interface TaskQueueSeen {
  taskQueueId: string;
  lastDateActive: string | null;
  lastTaskCreated: string | null;
}

/** A task queue's counts (getTaskQueueCounts). */
interface QueueCounts {
  pendingTasks: number;
  claimedTasks: number;
}

/** Where graph.js drew a task: the top left corner of its square, in CSS pixels. */
interface Position {
  x: number;
  y: number;
}

interface HTMLCanvasElement {
  /** For tests (graph.js): where a task is drawn. */
  positionOf?: (taskId: string) => Position | null;
}

/** A claimed or pending task of a task queue's listing (listPendingTasks / listClaimedTasks). */
interface QueuedTask {
  taskId: string;
  runId: number;
  task?: TaskDefinition;
  inserted?: string;
  claimed?: string;
  workerGroup?: string;
  workerId?: string;
}

/** A worker of listWorkers / getWorker, as far as the pages read it. */
interface Worker {
  workerGroup: string;
  workerId: string;
  latestTask?: { taskId: string; runId: number };
  firstClaim: string;
  lastDateActive?: string;
  expires?: string;
  quarantineUntil?: string;
  quarantineDetails?: Array<{ updatedAt: string; clientId: string; quarantineUntil: string; quarantineInfo?: string }>;
  recentTasks: Array<{ taskId: string; runId: number }>;
}
