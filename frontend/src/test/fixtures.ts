import type { JobDetail, JobGoodput, JobNode, JobProgress, JobSpec, JobSummary, Machine } from '../lib/types'

export function machine(overrides: Partial<Machine> = {}): Machine {
  return {
    id: 1,
    name: 'alpha',
    host: '10.0.0.11',
    port: 8001,
    status: 'online',
    drained: false,
    capabilities: {
      cpu_count: 16,
      memory: 64 * 1024 ** 3,
      disk_space: 512 * 1024 ** 3,
      gpu_count: 0,
      gpu_memory: 0,
      gpus: [],
    },
    current_load: { cpu_usage: 12.5, memory_usage: 40, gpu_usage: [] },
    labels: {},
    agent_version: '0.1.0',
    last_heartbeat: new Date().toISOString(),
    created_at: '2025-01-01T10:00:00Z',
    usage: [],
    volumes: [],
    declared_volumes: {},
    quarantined_at: null,
    quarantine_reason: '',
    quarantine_job: null,
    probation_until: null,
    health: {},
    measured_links: {},
    price_per_gpu_hour: null,
    price_per_machine_hour: null,
    ...overrides,
  }
}

export function jobSummary(overrides: Partial<JobSummary> = {}): JobSummary {
  return {
    id: 1,
    name: 'mnist-ddp',
    status: 'running',
    status_reason: '',
    world_size: 4,
    attempt: 0,
    restarts: 0,
    progress: progress({ step: 120, total_steps: 500, throughput: 812.5, loss: 0.42, eta_seconds: 30 }),
    created_at: '2025-01-01T10:00:00Z',
    started_at: '2025-01-01T10:00:05Z',
    finished_at: null,
    owner: 'ada',
    project: 'default',
    priority: 0,
    queued_at: '2025-01-01T10:00:00Z',
    borrowing: false,
    ...overrides,
  }
}

/** A job's progress as the server writes it: every number null until the ranks report it. */
export function progress(overrides: Partial<JobProgress> = {}): JobProgress {
  return {
    step: null,
    total_steps: null,
    loss: null,
    lr: null,
    throughput: null,
    throughput_by_rank: {},
    steps_per_second: null,
    samples_per_second: null,
    eta_seconds: null,
    stall: null,
    stragglers: [],
    ...overrides,
  }
}

/** A spec as the server stores it: what was submitted, every section filled with its defaults. */
export function jobSpec(overrides: Partial<JobSpec> = {}): JobSpec {
  return {
    name: 'char-gpt',
    project: 'default',
    entrypoint: 'examples/char_gpt.py',
    runtime: { pip: [] },
    args: ['--steps', '500'],
    env: {},
    resources: { nodes: 2, procs_per_node: 1, gpus_per_node: 0, min_gpu_memory: 0 },
    placement: { policy: 'pack', machines: [], oversubscribe: false },
    distributed: { backend: 'auto', launcher: 'torchrun', warm: true, strategy: 'data_parallel' },
    hyperparameters: {},
    scaling: { mode: 'keep_global_batch', lr_rule: 'linear', warmup_steps: 0 },
    checkpointing: { enabled: true, every_n_steps: 200, store: 'default', keep: 3 },
    fault_tolerance: {
      mode: 'restart', max_restarts: 3, heartbeat_timeout: 10, retry_same_error: 1, restart_delay: 0, stall_timeout: null, on_stall: 'report', exit_grace: 30, stragglers: 'report',
      straggler_threshold: 0.3, straggler_window: 60,
    },
    compression: { enabled: false, hook: 'fp16' },
    framework: 'pytorch',
    ...overrides,
  }
}

/** A running node of attempt 0 on machine `machineId`, one process. */
export function jobNode(overrides: Partial<JobNode> = {}): JobNode {
  return {
    id: 51,
    attempt: 0,
    node_rank: 0,
    machine: { id: 1, name: 'alpha', host: '10.0.0.11' },
    nproc: 1,
    rank_start: 0,
    rank_end: 0,
    gpus: [],
    status: 'running',
    status_reason: '',
    exit_code: null,
    pid: null,
    last_heartbeat: null,
    progress: { step: null, loss: null, throughput: null, ray: null },
    started_at: null,
    finished_at: null,
    ...overrides,
  }
}

export function jobDetail(overrides: Partial<JobDetail> = {}): JobDetail {
  const base = jobSummary({ id: 5, name: 'char-gpt', world_size: 2, ...overrides })
  return {
    ...base,
    spec: jobSpec({ name: base.name }),
    plan: null,
    links: {},
    master_addr: '10.0.0.11',
    master_port: 29500,
    nodes: [
      jobNode(),
      jobNode({ id: 52, node_rank: 1, machine: { id: 2, name: 'beta', host: '10.0.0.12' }, rank_start: 1, rank_end: 1 }),
    ],
    ...overrides,
  }
}

/** GET /api/jobs/{id}/goodput of a job that ran one attempt: queued a minute, trained four. */
export function jobGoodput(overrides: Partial<JobGoodput> = {}): JobGoodput {
  const parts = {
    queued: 60, preempted: 0, code_fetch: 0, environment_build: 0, launch: 10, training: 240, checkpoint: 5, recovery: 0,
    lost_work: 0, hang: 0, idle: 5,
  }
  const span = { started_at: '2025-01-01T09:55:00Z', ended_at: '2025-01-01T10:00:20Z', wall_seconds: 320, goodput: 0.75, parts }
  return { job: 5, status: 'running', live: true, ...span, attempts: [{ attempt: 0, ...span }], ...overrides }
}
