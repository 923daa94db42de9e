"""The distribution imports on its own, announces its plugin and builds its store from the
plugin's table."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import distribution

import pytest

import rock_archive_s3
from rock_archive_s3 import S3ArchiveStore
from rock_core.engine.config import EngineConfig
from rock_core.engine.extensions import build_archive_store
from rock_core.errors import InvalidParameter
from rock_core.plugins import Plugins, plugin_tables


def test_version_matches_distribution():
    assert rock_archive_s3.__version__ == distribution("rock-archive-s3").version


def test_the_plugin_is_announced_in_the_rock_group():
    eps = [
        (ep.name, ep.value)
        for ep in distribution("rock-archive-s3").entry_points
        if ep.group == "rock"
    ]
    assert eps == [("archive-s3", "rock_archive_s3.plugin")]


def test_loading_the_plugin_does_not_import_boto3():
    code = "import sys, rock_core.plugins as p; p.Plugins.load().archive_stores(); print('boto3' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


def test_the_engine_builds_the_store_from_the_plugin_table():
    plugins = Plugins.load()
    assert plugins.archive_stores()["s3"] is S3ArchiveStore
    config = EngineConfig(
        archive_store="s3",
        plugin_options={"archive-s3": {"bucket": "archives", "prefix": "team/a/"}},
    )
    environ = {
        "ROCK_PLUGIN_ARCHIVE_S3_PART_SIZE": "16m",
        "ROCK_PLUGIN_ARCHIVE_S3_ENDPOINT": "http://127.0.0.1:9",
    }
    store = build_archive_store(
        config, plugins, plugin_tables(config.plugin_options, environ, plugins.names())
    )
    assert isinstance(store, S3ArchiveStore)
    assert (store.bucket, store.endpoint, store.part_size) == (
        "archives",
        "http://127.0.0.1:9",
        16 * 1024**2,
    )
    assert store.key("sbx-1", "rootfs") == "team/a/sbx-1/rootfs"


def test_an_empty_prefix_puts_archives_at_the_bucket_root():
    assert S3ArchiveStore(bucket="b", prefix="").key("sbx", "logs") == "sbx/logs"


@pytest.mark.parametrize(
    "settings, field",
    [
        ({}, "plugins.archive-s3.bucket"),
        ({"bucket": " "}, "plugins.archive-s3.bucket"),
        ({"bucket": "b", "endpoint": "127.0.0.1:9000"}, "plugins.archive-s3.endpoint"),
        ({"bucket": "b", "access_key_id": "AKIA"}, "plugins.archive-s3.access_key_secret"),
        ({"bucket": "b", "access_key_secret": "s"}, "plugins.archive-s3.access_key_id"),
        ({"bucket": "b", "part_size": "1m"}, "plugins.archive-s3.part_size"),
        ({"bucket": "b", "part_size": "lots"}, "plugins.archive-s3.part_size"),
        ({"bucket": "b", "max_concurrency": "0"}, "plugins.archive-s3.max_concurrency"),
        ({"bucket": "b", "addressing_style": "dns"}, "plugins.archive-s3.addressing_style"),
    ],
)
def test_a_bad_setting_is_refused_naming_it(settings, field):
    with pytest.raises(InvalidParameter) as info:
        S3ArchiveStore(**settings)
    assert info.value.field == field
    assert field in str(info.value)


def test_the_region_comes_from_the_aws_variables_when_not_set(monkeypatch):
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-3")
    assert S3ArchiveStore(bucket="b").region == "eu-west-3"
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    assert S3ArchiveStore(bucket="b").region == "ap-south-1"
    assert S3ArchiveStore(bucket="b", region="us-west-2").region == "us-west-2"
