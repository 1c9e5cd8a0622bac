"""A store under ``s3://bucket/prefix``, through boto3.

Endpoint, region and credentials come from the standard AWS environment (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ...), nothing is hard-coded. A single ``put_object`` is atomic. "Never
overwrite" uses a conditional put (``If-None-Match: *``); the release report is merged with an
optimistic compare-and-swap on its ETag (``If-Match``), retried with backoff after a lost race.
"""

from __future__ import annotations

import random
import re
import secrets
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from tinyllm.store.base import CAS_ATTEMPTS, Store
from tinyllm.store.documents import MAX_JSON_BYTES, MAX_OBJECT_BYTES, json_bytes
from tinyllm.store.errors import (
    StoreConflictError,
    StoreError,
    StoreExistsError,
    StoreKeyError,
    StoreUnreadableError,
    naming,
)
from tinyllm.store.keys import check_key

_S3_URI = re.compile(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(.*))?$")

CAS_BACKOFF_S = (0.05, 2.0)
"""First and largest wait (seconds) between compare-and-swap retries: exponential, with jitter."""


class S3Store(Store):
    """A store under ``s3://bucket/prefix`` through a boto3 S3 client.

    The client comes from ``boto3.client("s3")`` unless one is given, so endpoint, region and
    credentials follow the standard AWS environment and config files (``AWS_ENDPOINT_URL`` for
    MinIO / moto / any S3-compatible server).
    """

    def __init__(self, bucket: str, prefix: str = "", client: Any = None) -> None:
        if client is None:
            import boto3  # imported here: local stores should not pay for boto3

            client = boto3.client("s3")
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.uri = f"s3://{bucket}/{self.prefix}"

    def _key(self, key: str) -> str:
        return self.prefix + check_key(key)

    @staticmethod
    def _code(err: Exception) -> str:
        return str(getattr(err, "response", {}).get("Error", {}).get("Code", ""))

    def write_site_file(self, key: str, data: bytes, content_type: str) -> str:
        if not check_key(key).startswith("dashboard/"):
            raise StoreError(f"{self.where(key)}: expected a key under dashboard/, got {key!r}")
        self.client.put_object(
            Bucket=self.bucket, Key=self._key(key), Body=data, ContentType=content_type
        )
        return key

    def put_bytes(self, key: str, data: bytes, *, overwrite: bool = True) -> None:
        k = self._key(key)
        if overwrite:
            with naming(self.where(key)):
                self.client.put_object(Bucket=self.bucket, Key=k, Body=data)
            return
        try:
            # a conditional put: S3 itself refuses when the key exists (no check-then-write race)
            self.client.put_object(Bucket=self.bucket, Key=k, Body=data, IfNoneMatch="*")
        except ClientError as e:
            code = self._code(e)
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                # 409: another conditional put of this key is in flight (it will exist)
                raise StoreExistsError(
                    f"{self.where(key)}: refusing to overwrite; it exists"
                ) from None
            if code not in ("NotImplemented", "501"):
                e.add_note(self.where(key))  # any other refusal: keep its type, name the key
                raise
            # an S3-compatible server without conditional writes: check, then write
            if self.exists(key):
                raise StoreExistsError(
                    f"{self.where(key)}: refusing to overwrite; it exists"
                ) from None
            self.client.put_object(Bucket=self.bucket, Key=k, Body=data)

    def get_bytes(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> bytes:
        return self._get(key, max_bytes)[0]

    def _get(self, key: str, max_bytes: int = MAX_OBJECT_BYTES) -> tuple[bytes, str]:
        """The bytes at ``key`` and their ETag; an object over ``max_bytes`` is refused by its
        ContentLength before its body is read (and a body longer than that is cut and refused)."""
        try:
            with naming(self.where(key)):
                obj = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
                size = obj.get("ContentLength")
                if isinstance(size, int) and size > max_bytes:
                    obj["Body"].close()
                    raise StoreUnreadableError(
                        f"{self.where(key)}: expected at most {max_bytes} bytes, got {size}"
                    )
                data = obj["Body"].read(max_bytes + 1)
                if len(data) > max_bytes:
                    raise StoreUnreadableError(
                        f"{self.where(key)}: expected at most {max_bytes} bytes, got more"
                    )
                return data, obj["ETag"]
        except ClientError as e:
            if self._code(e) in ("NoSuchKey", "404", "NotFound"):
                raise StoreKeyError(f"{self.where(key)}: no such key") from None
            if self._code(e) == "NoSuchBucket":
                raise StoreKeyError(f"{self.uri}: no such bucket {self.bucket!r}") from None
            raise

    def update_json(self, key: str, update: Callable[[Any], Any], what: str = "JSON") -> Any:
        """Optimistic compare-and-swap on the object's ETag: read it (bytes + ETag), compute
        the new object, put it with ``If-Match: <etag>`` (``If-None-Match: *`` when there was
        none). S3 answers 412 Precondition Failed when another writer got in between (409
        ConditionalRequestConflict when two puts race): re-read, recompute, retry with
        exponential backoff and jitter, at most :data:`CAS_ATTEMPTS` times."""
        k = self._key(key)
        delay, cap = CAS_BACKOFF_S
        for _attempt in range(CAS_ATTEMPTS):
            try:
                data, etag = self._get(key, MAX_JSON_BYTES)
                old = self.parse_json(key, data, what)
                cond = {"IfMatch": etag}
            except StoreKeyError as e:
                if "no such bucket" in str(e):
                    raise
                if self.list(key + "/"):  # keys under "<key>/": a folder, as a local store says
                    raise StoreUnreadableError(
                        f"{self.where(key)}: expected a file, got a folder"
                    ) from None
                old, cond = None, {"IfNoneMatch": "*"}
            new = update(old)
            body = json_bytes(new)
            try:
                with naming(self.where(key)):
                    self.client.put_object(Bucket=self.bucket, Key=k, Body=body, **cond)
                return new
            except ClientError as e:
                code = self._code(e)
                if code in ("NotImplemented", "501"):
                    raise StoreError(
                        f"{self.where(key)}: expected an S3 server with conditional writes "
                        f"(If-Match), got {code}: the release report cannot be merged safely"
                    ) from None
                if code not in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                    raise
            time.sleep(random.uniform(0, delay))  # full jitter: racing writers spread out
            delay = min(cap, delay * 2)
        raise StoreConflictError(
            f"{self.where(key)}: compare-and-swap lost {CAS_ATTEMPTS} times in a row; "
            "too many concurrent writers of this key"
        )

    def check_writable(self) -> None:
        probe = self._key(f"tmp-probe-{secrets.token_hex(4)}")
        with naming(f"store {self.uri}"):
            self.client.put_object(Bucket=self.bucket, Key=probe, Body=b"")
            self.client.delete_object(Bucket=self.bucket, Key=probe)

    def exists(self, key: str) -> bool:
        try:
            with naming(self.where(key)):
                self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as e:
            if self._code(e) in ("NoSuchKey", "404", "NotFound"):
                return False
            raise
        return True

    def list(self, prefix: str = "") -> list[str]:
        keys: list[str] = []
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix + prefix
        )
        try:
            with naming(self.where(prefix) if prefix else self.uri):
                for page in pages:
                    keys.extend(obj["Key"][len(self.prefix) :] for obj in page.get("Contents", []))
        except ClientError as e:
            if self._code(e) == "NoSuchBucket":
                raise StoreKeyError(f"{self.uri}: no such bucket {self.bucket!r}") from None
            raise
        return sorted(keys)


def parse_s3_uri(uri: str) -> tuple[str, str]:
    m = _S3_URI.match(uri)
    if not m:
        raise StoreError(
            f"store: expected s3://bucket/prefix (bucket: 3-63 of [a-z0-9.-]), got {uri!r}"
        )
    return m.group(1), m.group(2) or ""
