from django.apps import AppConfig


class CheckpointsConfig(AppConfig):
    name = "torchyard_server.checkpoints"
    label = "checkpoints"

    def ready(self) -> None:
        from ..jobs.registries import register_checkpoint_times, register_resume_lookup
        from .selectors import last_committed_at, latest_good_manifest_uri

        # A recovered job's next attempt resumes from the newest good manifest (jobs asks through
        # its registry: it sits below this app and does not import it).
        register_resume_lookup(lambda job_id: latest_good_manifest_uri(job_id=job_id))
        # Preemption chooses the victim that loses the least work: the least time since a commit.
        register_checkpoint_times(lambda job_ids: last_committed_at(job_ids=job_ids))
