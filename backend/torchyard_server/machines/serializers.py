from __future__ import annotations

import posixpath
import re

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ..rest.listing import FlatListSerializer, StoredJsonOut
from .models import Machine
from .registries import machine_usage
from .volumes import NAME_PATTERN, MachineVolume, merged_volumes


class MachineUsageOut(serializers.Serializer):
    project = serializers.CharField()
    gpus = serializers.IntegerField(help_text="GPUs its live nodes hold here")
    processes = serializers.IntegerField(help_text="processes its live nodes run here")


class MachineGpuOut(serializers.Serializer):
    index = serializers.IntegerField()
    name = serializers.CharField()
    memory_mb = serializers.IntegerField()


class MachineCacheOut(serializers.Serializer):
    bundles = serializers.ListField(child=serializers.CharField(), help_text="sha256 of each code bundle unpacked there")
    environments = serializers.ListField(child=serializers.CharField(), help_text="key of each prepared virtualenv")

    class Meta:
        # A heartbeat without a cache summary stores {}.
        optional_fields = ("bundles", "environments")


class MachineVolumeReportOut(serializers.Serializer):
    name = serializers.CharField()
    path = serializers.CharField()
    exists = serializers.BooleanField(help_text="whether the path is a directory on the machine")
    total_bytes = serializers.IntegerField(allow_null=True, help_text="its filesystem's size; null when it does not exist")
    free_bytes = serializers.IntegerField(allow_null=True, help_text="free on its filesystem; null when it does not exist")


class MachineVolumeOut(serializers.Serializer):
    name = serializers.CharField()
    path = serializers.CharField(help_text="on the machine; the agent's when both it and the server declare the name")
    source = serializers.ChoiceField(choices=["agent", "server"], help_text=(
        "agent: `torchyard agent --volume` (its heartbeat says whether it exists); server: PATCH /api/machines/{id}"))
    exists = serializers.BooleanField(allow_null=True, help_text="null: declared on the server, not checked by the agent")
    total_bytes = serializers.IntegerField(allow_null=True)
    free_bytes = serializers.IntegerField(allow_null=True)
    storage_class = serializers.CharField(allow_null=True, help_text=(
        "the class the agent declares it with (--volume NAME=PATH,class=CLASS); null: none"))


class MachineInterfaceOut(serializers.Serializer):
    interface = serializers.CharField(help_text='"eth1"')
    address = serializers.CharField()
    network = serializers.CharField(help_text='"10.0.1.0/24"')
    speed_mbit = serializers.IntegerField(help_text="the link speed the kernel reports; 0 when it does not say")


class MachineLinkOut(serializers.Serializer):
    mb_per_s = serializers.FloatField(help_text="the median over the pairs it was in, MB/s")
    latency_ms = serializers.FloatField()
    pairs = serializers.IntegerField(help_text="how many of the job's pairs it was in")
    job = serializers.IntegerField(help_text="the job whose preflight measured it")
    measured_at = serializers.FloatField(help_text="epoch seconds")


# What an agent reports (agent/capabilities.py, agent/main.py heartbeat_once). A machine whose agent
# never connected has reported nothing ({}), and an older agent leaves newer keys out: every field may
# be missing.
class MachineCapabilitiesOut(StoredJsonOut):
    cpu_count = serializers.IntegerField()
    memory = serializers.IntegerField(help_text="bytes")
    disk_space = serializers.IntegerField(help_text="bytes free where the agent works")
    gpu_count = serializers.IntegerField()
    gpu_memory = serializers.IntegerField(help_text="MB, every GPU's together")
    gpus = MachineGpuOut(many=True, help_text="the GPUs jobs are placed on: NVML's, or the agent's declared ones")
    gpus_declared = serializers.BooleanField(help_text=(
        "true: the agent declares its GPUs (`torchyard agent --gpus --models --memories`); only those are scheduled"))
    gpus_detected = MachineGpuOut(many=True, help_text="with declared GPUs: the GPUs NVML sees on the machine")
    gpu_warnings = serializers.ListField(child=serializers.CharField(), help_text=(
        "with declared GPUs: where the declaration differs from what NVML sees (a model, a memory size, a GPU "
        "NVML does not see, or no NVML GPU at all)"))
    python_version = serializers.CharField(help_text="the training Python's; empty when it could not be read")
    torch_version = serializers.CharField(help_text="the training Python's torch; empty when it could not be read")
    cache = MachineCacheOut(help_text="what its caches hold: it is what makes a launch fast")
    volumes = MachineVolumeReportOut(many=True, help_text="the agent's own volumes (--volume NAME=PATH)")
    interfaces = MachineInterfaceOut(many=True, help_text="its IPv4 interfaces that are up (loopback left out)")
    memory_port = serializers.IntegerField(help_text=(
        "where its agent serves the memory checkpoints it holds for jobs (checkpointing.memory; --memory-port)"))

    class Meta:
        optional_fields = ("cpu_count", "memory", "disk_space", "gpu_count", "gpu_memory", "gpus", "python_version",
                           "torch_version", "cache", "volumes", "gpus_declared", "gpus_detected", "gpu_warnings",
                           "interfaces", "memory_port")


class MachineLoadOut(StoredJsonOut):
    cpu_usage = serializers.FloatField(help_text="percent")
    memory_usage = serializers.FloatField(help_text="percent")
    gpu_usage = serializers.ListField(child=serializers.FloatField(), help_text="percent, by GPU index")

    class Meta:
        optional_fields = ("cpu_usage", "memory_usage", "gpu_usage")


class MachineHealthCheckOut(serializers.Serializer):
    name = serializers.CharField(help_text="what was checked: python, torch, compute, gpu, collective, disk")
    ok = serializers.BooleanField()
    detail = serializers.CharField(help_text="what it found, or why it failed")
    seconds = serializers.FloatField()


class MachineHealthOut(StoredJsonOut):
    at = serializers.DateTimeField(help_text="when its agent answered")
    ok = serializers.BooleanField(help_text="every check passed")
    checks = MachineHealthCheckOut(many=True)

    class Meta:
        optional_fields = ("at", "ok", "checks")


class MachineOut(serializers.ModelSerializer):
    usage = serializers.SerializerMethodField(help_text=(
        "What each project's live jobs take here; project names and counts only, so everyone who sees "
        "the cluster sees who uses it and no one sees other projects' jobs."))
    capabilities = MachineCapabilitiesOut(help_text="what its agent reported")
    current_load = MachineLoadOut(help_text="as of the last heartbeat")
    labels = serializers.DictField(child=serializers.CharField())
    health = MachineHealthOut(help_text=(
        "the last health check its agent ran (asked when a quarantine's probation is over); {} before any"))
    volumes = serializers.SerializerMethodField(help_text=(
        "the volumes jobs may ask for here: the agent's and the server's declarations, merged by name"))
    # Its own column (read as such in a list), and what the dashboard's edit field starts from.
    declared_volumes = serializers.DictField(child=serializers.CharField(), source="volumes", help_text=(
        "the volumes declared here on the server (name: path), as PATCH takes them"))
    measured_links = serializers.DictField(child=MachineLinkOut(), help_text=(
        "by interface: what the latest job preflight that measured it found ({} before any)"))

    class Meta:
        model = Machine
        fields = [
            "id", "name", "host", "port", "status", "drained", "capabilities", "current_load", "labels",
            "agent_version", "last_heartbeat", "created_at", "usage", "volumes", "declared_volumes",
            "quarantined_at", "quarantine_reason", "quarantine_job", "probation_until", "health", "measured_links",
            "price_per_gpu_hour", "price_per_machine_hour",
        ]
        # A thousand machines are listed on every GET /api/machines and cluster-stream snapshot.
        list_serializer_class = FlatListSerializer

    @extend_schema_field(MachineUsageOut(many=True))
    def get_usage(self, machine: Machine) -> list[dict]:
        # Looked up once per response: a list's items share their root serializer's context.
        if "usage" not in self.context:
            self.context["usage"] = machine_usage()
        return self.context["usage"].get(machine.pk, [])

    @extend_schema_field(MachineVolumeOut(many=True))
    def get_volumes(self, machine: Machine) -> list[MachineVolume]:
        # A list hands a `.values()` row: `volumes` is there because declared_volumes reads it.
        return merged_volumes(machine.volumes, machine.capabilities)


class MachineIn(serializers.Serializer):
    name = serializers.RegexField(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$", max_length=100, error_messages={
        "invalid": "letters, digits, '.', '_' and '-' only, starting with a letter or digit."})
    host = serializers.CharField(max_length=255)
    port = serializers.IntegerField(min_value=1, max_value=65535, default=8001)
    labels = serializers.DictField(child=serializers.CharField(max_length=200), default=dict)

    def validate_name(self, value: str) -> str:
        if Machine.objects.filter(name=value).exists():
            raise serializers.ValidationError(f"a machine named {value!r} already exists.")
        return value


class MachinePatch(serializers.Serializer):
    host = serializers.CharField(max_length=255, required=False)
    port = serializers.IntegerField(min_value=1, max_value=65535, required=False)
    labels = serializers.DictField(child=serializers.CharField(max_length=200), required=False)
    status = serializers.ChoiceField(choices=["draining", "online"], required=False, help_text=(
        "draining: no new nodes are placed here; online: undo draining."))
    quarantined = serializers.BooleanField(required=False, help_text=(
        "false: release the machine from the quarantine a hang's verdict put it in (its health check "
        "would after the probation). Only the control plane quarantines a machine."))
    volumes = serializers.DictField(child=serializers.CharField(max_length=4096), required=False, help_text=(
        "the volumes declared on the server, name: absolute path, replacing the ones declared before "
        "(the agent's own --volume win for a name both declare)"))
    price_per_gpu_hour = serializers.FloatField(min_value=0, max_value=1e9, allow_null=True, required=False, help_text=(
        "what one of its GPUs costs per hour (null: not priced); the goodput roll-ups cost nodes' time with it"))
    price_per_machine_hour = serializers.FloatField(min_value=0, max_value=1e9, allow_null=True, required=False, help_text=(
        "what the whole machine costs per hour, for CPU machines (null: not priced); a node pays its share"))

    def validate_quarantined(self, value: bool) -> bool:
        if value:
            raise serializers.ValidationError("only false: a machine is quarantined by a hang's verdict, not by hand; "
                                              "drain it (status: draining) to keep jobs off it.")
        return value

    def validate_volumes(self, value: dict[str, str]) -> dict[str, str]:
        errors = []
        if len(value) > 64:
            errors.append("64 volumes at most.")
        for name, path in value.items():
            if not re.match(NAME_PATTERN, name):
                errors.append(f"{name!r}: a name is lowercase letters, digits, '.', '_' and '-', starting with a "
                              "letter or digit, 63 at most.")
            elif not path.startswith("/") or "\x00" in path:
                errors.append(f"{name}: {path!r} is not an absolute path.")
        if errors:
            raise serializers.ValidationError(errors)
        return {name: posixpath.normpath(path) for name, path in value.items()}


class MachineWithTokenOut(MachineOut):
    """A machine just added, or whose token was just rotated: its token, shown this once."""

    token = serializers.CharField(help_text="the machine's token: shown this once, never again")
    agent_command = serializers.CharField(help_text="the command that starts its agent")

    class Meta(MachineOut.Meta):
        fields = [*MachineOut.Meta.fields, "token", "agent_command"]


class AgentMachineOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    host = serializers.CharField()


class AgentConfigOut(serializers.Serializer):
    machine = AgentMachineOut()
    redis_url = serializers.CharField(help_text="the broker and event stream the agent connects to")
    storage_url = serializers.CharField(help_text="where checkpoints and artifacts are kept")
    ca_pem = serializers.CharField(allow_blank=True, help_text="the authority (PEM) that signs the TLS "
                                   "certificate of a rediss:// redis_url; empty when the system's authorities do")


class AgentHealthCheckIn(serializers.Serializer):
    name = serializers.CharField(max_length=40)
    ok = serializers.BooleanField()
    detail = serializers.CharField(max_length=2000, allow_blank=True)
    seconds = serializers.FloatField(min_value=0)


class AgentHealthIn(serializers.Serializer):
    """What `torchyard agent` reports after a health check (workers/torchyard/agent/health.py)."""

    ok = serializers.BooleanField()
    checks = AgentHealthCheckIn(many=True, max_length=20)
