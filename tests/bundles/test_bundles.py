"""Uploading code bundles: content-addressed, owned by their uploader, hostile archives refused with
the member named, and a job may only run a bundle its submitter uploaded."""

from __future__ import annotations

import hashlib
import io
import random
import tarfile

import pytest
import zstandard
from clients import downloaded, token_for
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def store(settings, tmp_path):
    settings.STORAGE_URL = (tmp_path / "store").as_uri()
    return tmp_path / "store"


def archive(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return zstandard.ZstdCompressor().compress(raw.getvalue())


def put(client: APIClient, body: bytes, sha256: str | None = None):
    sha256 = sha256 or hashlib.sha256(body).hexdigest()
    return client.put(f"/api/bundles/{sha256}", data=body, content_type="application/octet-stream")


def client_for(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_for(user)}")
    return client


def test_an_upload_is_kept_under_its_sha256_and_only_its_uploader_sees_it(api, teammate, store):
    body = archive({"train.py": b"print('hi')\n", "data/x.txt": b"1\n"})
    sha256 = hashlib.sha256(body).hexdigest()
    assert api.head(f"/api/bundles/{sha256}").status_code == 404
    created = put(api, body)
    assert created.status_code == 201, created.json()
    assert created.json()["file_count"] == 2 and {f["path"] for f in created.json()["files"]} == {"train.py", "data/x.txt"}
    assert (store / "bundles" / f"{sha256}.tar.zst").read_bytes() == body
    assert api.head(f"/api/bundles/{sha256}").status_code == 200
    assert put(api, body).status_code == 200  # already there: nothing new
    # Another user learns nothing of it until they upload the same bytes themselves.
    other = client_for(teammate)
    assert other.head(f"/api/bundles/{sha256}").status_code == 404
    assert put(other, body).status_code == 200
    assert other.head(f"/api/bundles/{sha256}").status_code == 200
    assert api.get("/api/bundles/limits").json() == {"max_bytes": 200 * 1024 * 1024}


@pytest.mark.parametrize(
    ("files", "links", "message"),
    [
        ({"/abs/evil.py": b"x"}, None, "/abs/evil.py: has an absolute path"),
        ({"../evil.py": b"x"}, None, "../evil.py: has a '..' component"),
        ({}, {"out": "/etc/passwd"}, "out: is a symlink to '/etc/passwd', outside the bundle"),
    ],
)
def test_a_hostile_archive_is_refused_naming_the_member(api, store, files, links, message):
    response = put(api, archive(files, links))
    assert response.status_code == 400
    assert message in response.json()["bundle"][0]
    assert not list((store / "bundles").glob("*"))  # nothing of it kept, not even the spooled upload


def test_a_body_that_does_not_match_its_sha256_or_is_not_an_archive_is_refused(api, store, settings):
    body = archive({"train.py": b"x"})
    mismatch = put(api, body, sha256="0" * 64)
    assert mismatch.status_code == 400 and "hashes to" in mismatch.json()["bundle"][0]
    text = put(api, b"hello, not a tarball")
    assert text.status_code == 400 and "not a readable tar archive" in text.json()["bundle"][0]
    assert put(api, body, sha256="not-hex").status_code == 400
    settings.BUNDLE_MAX_BYTES = 10
    too_big = put(api, body)
    assert too_big.status_code == 400 and "over the limit" in too_big.json()["bundle"][0]


def test_a_job_runs_only_a_bundle_its_submitter_uploaded_and_a_file_of_it(api, teammate, two_machines):
    body = archive({"train.py": b"print(1)\n"})
    sha256 = hashlib.sha256(body).hexdigest()
    spec = {"name": "own", "code": {"bundle": sha256}, "entrypoint": "train.py"}
    missing = api.post("/api/jobs", spec, format="json")
    assert missing.status_code == 400 and "upload it first" in missing.json()["code"]["bundle"][0]
    assert put(api, body).status_code == 201
    assert api.post("/api/jobs", spec, format="json").status_code == 201
    absent = api.post("/api/jobs", {**spec, "entrypoint": "nope.py"}, format="json")
    assert absent.status_code == 400 and "not a file of bundle" in absent.json()["entrypoint"][0]
    both = api.post("/api/jobs", {**spec, "module": "pkg.train"}, format="json")
    assert both.status_code == 400 and "not both" in both.json()["module"][0]
    bad_module = api.post("/api/jobs", {**spec, "entrypoint": None, "module": "os; rm -rf /"}, format="json")
    assert bad_module.status_code == 400 and "module" in bad_module.json()
    options = api.post("/api/jobs", {**spec, "runtime": {"pip": ["--index-url=http://evil"]}}, format="json")
    assert options.status_code == 400 and "pip options" in options.json()["runtime"]["pip"][0]
    stranger = client_for(teammate).post("/api/jobs", spec, format="json")
    assert stranger.status_code == 400 and "no such bundle" in stranger.json()["code"]["bundle"][0]


def test_a_machine_fetches_a_bundle_only_for_a_job_placed_on_it(api, anonymous, owner):
    from torchyard_server.jobs.models import Job, JobNode
    from torchyard_server.machines.services import machine_create

    body = archive({"train.py": b"print(1)\n"})
    sha256 = hashlib.sha256(body).hexdigest()
    put(api, body)
    machine, token = machine_create(name="worker", host="10.1.1.1")
    url = f"/api/agent/bundles/{sha256}"
    assert anonymous.get(url, HTTP_AUTHORIZATION="Machine 99.not-a-real-token-at-all").status_code == 401
    assert anonymous.get(url, HTTP_AUTHORIZATION=f"Machine {token}").status_code == 404
    job = Job.objects.create(name="j", spec={"code": {"bundle": sha256}}, owner=owner)
    JobNode.objects.create(job=job, attempt=0, machine=machine, machine_name="worker", host="10.1.1.1",
                           node_rank=0, nproc=1, rank_start=0, rank_end=0)
    fetched = anonymous.get(url, HTTP_AUTHORIZATION=f"Machine {token}")
    assert fetched.status_code == 200 and downloaded(fetched) == body
    assert fetched["X-Bundle-Sha256"] == sha256


def test_a_signed_grant_lets_one_machine_warm_its_cache_with_one_bundle(api, anonymous):
    from torchyard_server.jobs.control.grants import bundle_grant
    from torchyard_server.machines.services import machine_create

    body = archive({"train.py": b"print(1)\n"})
    sha256 = hashlib.sha256(body).hexdigest()
    put(api, body)
    machine, token = machine_create(name="warm-me", host="10.1.1.2")
    other, _ = machine_create(name="not-me", host="10.1.1.3")
    url = f"/api/agent/bundles/{sha256}"
    headers = {"HTTP_AUTHORIZATION": f"Machine {token}"}
    granted = anonymous.get(url, HTTP_X_TORCHYARD_GRANT=bundle_grant(sha256=sha256, machine_id=machine.pk), **headers)
    assert granted.status_code == 200 and downloaded(granted) == body
    for grant in (bundle_grant(sha256=sha256, machine_id=other.pk), bundle_grant(sha256="0" * 64, machine_id=machine.pk),
                  "forged:grant"):
        assert anonymous.get(url, HTTP_X_TORCHYARD_GRANT=grant, **headers).status_code == 404


def test_a_hostile_body_sent_under_another_sha256_is_refused_for_its_hash(api, store):
    # The upload is hashed and checked in one pass; the hash still speaks first: a body that is not
    # the one named is refused as such, whatever its members.
    response = put(api, archive({"../evil.py": b"x"}), sha256="0" * 64)
    assert response.status_code == 400 and "hashes to" in response.json()["bundle"][0]
    assert not list((store / "bundles").glob("*"))


def test_a_body_past_the_limit_is_refused_while_it_is_read_and_nothing_is_kept(owner, store, settings):
    # The view refuses a Content-Length over the limit; the stream itself is counted too.
    from torchyard.bundles import BundleError
    from torchyard_server.bundles.models import Bundle
    from torchyard_server.bundles.services import bundle_store

    body = archive({"weights.bin": random.Random(7).randbytes(1 << 20)})  # incompressible
    settings.BUNDLE_MAX_BYTES = len(body) // 2
    with pytest.raises(BundleError, match="larger than the limit"):
        bundle_store(sha256=hashlib.sha256(body).hexdigest(), stream=io.BytesIO(body), owner=owner)
    assert not list((store / "bundles").glob("*")) and not Bundle.objects.exists()


def test_a_functions_payload_is_judged_by_its_size_not_its_compression_ratio(api, store, settings):
    """A function called with a big array of ones pickles to bytes that compress thousands of times:
    as a function's payload that is no bomb, and only the size limit applies; as code it still is."""
    ones = archive({"function.pkl": b"\x01" * (40 << 20), "function.json": b"{}"})
    assert len(ones) < (40 << 20) // 1000  # far past the 200:1 a project may compress
    as_code = put(api, ones)
    assert as_code.status_code == 400 and "implausible compression ratio" in as_code.json()["bundle"][0]
    sha256 = hashlib.sha256(ones).hexdigest()
    stored = api.put(f"/api/bundles/{sha256}?kind=function", ones, content_type="application/octet-stream")
    assert stored.status_code == 201, stored.json()
    assert (store / "bundles" / f"{sha256}.tar.zst").exists() or any(store.rglob(f"{sha256}.tar.zst"))
    # The size limit still holds, and a payload holds the payload's files only.
    settings.BUNDLE_MAX_BYTES = 30 << 20
    bigger = archive({"function.pkl": b"\x01" * (41 << 20), "function.json": b"{}"})
    too_big = api.put(f"/api/bundles/{hashlib.sha256(bigger).hexdigest()}?kind=function", bigger,
                      content_type="application/octet-stream")
    assert too_big.status_code == 400 and "unpacks to more than" in too_big.json()["bundle"][0], too_big.json()
    other = archive({"function.pkl": b"x", "function.json": b"{}", "train.py": b"print()"})
    refused = api.put(f"/api/bundles/{hashlib.sha256(other).hexdigest()}?kind=function", other,
                      content_type="application/octet-stream")
    assert refused.status_code == 400
    assert refused.json()["bundle"] == ["a function's payload holds function.pkl and function.json only"]
    unknown = api.put(f"/api/bundles/{sha256}?kind=data", ones, content_type="application/octet-stream")
    assert unknown.status_code == 400 and unknown.json()["kind"] == ["'data': one of code, function."]
