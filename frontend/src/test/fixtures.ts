import type { JobDetail, JobSummary, Machine } from '../lib/types'

export function machine(overrides: Partial<Machine> = {}): Machine {
  return {
    id: 1,
    name: 'alpha',
    host: '10.0.0.11',
    port: 8001,
    status: 'online',
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
    progress: { step: 120, total_steps: 500, throughput: 812.5, loss: 0.42, eta_seconds: 30 },
    created_at: '2025-01-01T10:00:00Z',
    started_at: '2025-01-01T10:00:05Z',
    finished_at: null,
    owner: 'ada',
    project: 'default',
    ...overrides,
  }
}

export function jobDetail(overrides: Partial<JobDetail> = {}): JobDetail {
  const base = jobSummary({ id: 5, name: 'char-gpt', world_size: 2, ...overrides })
  return {
    ...base,
    spec: {
      name: base.name,
      entrypoint: 'examples/char_gpt.py',
      args: ['--steps', '500'],
      env: {},
      resources: { nodes: 2, procs_per_node: 1, gpus_per_node: 0, min_gpu_memory: 0 },
      placement: { policy: 'pack', machines: [] },
      distributed: { backend: 'auto' },
      hyperparameters: {},
      scaling: { mode: 'keep_global_batch' },
      checkpointing: { enabled: true, every_n_steps: 200, keep: 3 },
      fault_tolerance: { max_restarts: 3, heartbeat_timeout: 10 },
    },
    plan: null,
    master_addr: '10.0.0.11',
    master_port: 29500,
    nodes: [
      {
        id: 51,
        attempt: 0,
        node_rank: 0,
        machine: { id: 1, name: 'alpha', host: '10.0.0.11' },
        nproc: 1,
        rank_start: 0,
        rank_end: 0,
        status: 'running',
        exit_code: null,
        last_heartbeat: null,
        progress: null,
      },
      {
        id: 52,
        attempt: 0,
        node_rank: 1,
        machine: { id: 2, name: 'beta', host: '10.0.0.12' },
        nproc: 1,
        rank_start: 1,
        rank_end: 1,
        status: 'running',
        exit_code: null,
        last_heartbeat: null,
        progress: null,
      },
    ],
    ...overrides,
  } as JobDetail
}
