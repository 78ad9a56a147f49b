/**
 * The queue's query key. The queue feature fetches and keeps that cache (get-queue.ts, queue-cache.ts);
 * a job's priority change (jobs' update-job-priority.ts) updates it too. Here, below both features, so
 * that jobs needs nothing from the queue feature, which shows jobs (and their priority control).
 */
export const queueQueryKey = ['queue'] as const
