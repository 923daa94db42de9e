"""Files: read/write (ROCK), multipart upload (ROCK), download and list_dir (rock)."""

from __future__ import annotations

import io
import os
import stat
import zipfile


def test_write_creates_parents_and_read_returns_it(rocklet, tmp_path):
    target = tmp_path / "a" / "b" / "note.txt"
    assert rocklet.ok("/write_file", path=str(target), content="héllo\r\nworld\n") == {
        "success": True,
        "message": "",
    }
    assert target.read_bytes() == "héllo\r\nworld\n".encode()
    assert rocklet.ok("/read_file", path=str(target)) == {"content": "héllo\r\nworld\n"}
    rocklet.ok("/write_file", path=str(target), content="short")
    assert rocklet.ok("/read_file", path=str(target))["content"] == "short"


def test_read_with_encoding_and_errors(rocklet, tmp_path):
    target = tmp_path / "latin.txt"
    target.write_bytes(b"caf\xe9 ok")
    assert rocklet.ok("/read_file", path=str(target), encoding="latin-1")["content"] == "café ok"
    assert rocklet.ok("/read_file", path=str(target), errors="replace")["content"] == "caf\ufffd ok"


def test_non_utf8_file_is_a_clear_error(rocklet, tmp_path):
    target = tmp_path / "binary.bin"
    target.write_bytes(b"abc\xff\xfe")
    err = rocklet.error("/read_file", path=str(target))
    assert err["class_path"] == "rock.rocklet.exceptions.FileDecodeError"
    assert str(target) in err["message"]
    assert "offset 3" in err["message"]
    assert err["extra_info"]["offset"] == 3


def test_reading_a_directory_or_a_missing_file(rocklet, tmp_path):
    err = rocklet.error("/read_file", path=str(tmp_path))
    assert err["class_path"] == "builtins.IsADirectoryError"
    assert "Is a directory" in err["message"]
    assert str(tmp_path) in err["message"]
    err = rocklet.error("/read_file", path=str(tmp_path / "missing"))
    assert err["class_path"] == "builtins.FileNotFoundError"


def test_upload_a_file(rocklet, tmp_path):
    target = tmp_path / "deep" / "dir" / "uploaded.bin"
    payload = os.urandom(300_000)
    response = rocklet.client.post(
        "/upload",
        data={"target_path": str(target), "sandbox_id": "sb"},
        files={"file": ("original.bin", payload, "application/octet-stream")},
    )
    assert response.status_code == 200, response.text
    assert response.json() == {"success": True, "message": "", "file_name": str(target)}
    assert target.read_bytes() == payload
    assert [p.name for p in target.parent.iterdir()] == ["uploaded.bin"]  # no temporary left


def test_upload_with_the_file_part_first(rocklet, tmp_path):
    # Field order is the client's choice; the target may come after the file.
    target = tmp_path / "late.txt"
    boundary = "XyZbOuNdArY"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="x.txt"\r\n\r\nfile body\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="target_path"\r\n\r\n{target}\r\n--{boundary}--\r\n'
    )
    response = rocklet.client.post(
        "/upload",
        content=body.encode(),
        headers={"content-type": "multipart/form-data; boundary=" + boundary},
    )
    assert response.status_code == 200, response.text
    assert target.read_text() == "file body"


def test_upload_and_unzip(rocklet, tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("top.txt", "top")
        zf.writestr("sub/inner.txt", "inner")
        info = zipfile.ZipInfo("bin/run.sh")
        info.external_attr = (stat.S_IFREG | 0o755) << 16
        zf.writestr(info, "#!/bin/sh\necho run\n")
    target = tmp_path / "unpacked"
    response = rocklet.client.post(
        "/upload",
        data={"target_path": str(target), "unzip": "true"},
        files={"file": ("bundle.zip", buf.getvalue(), "application/zip")},
    )
    assert response.status_code == 200, response.text
    assert (target / "top.txt").read_text() == "top"
    assert (target / "sub" / "inner.txt").read_text() == "inner"
    assert os.access(target / "bin" / "run.sh", os.X_OK)


def test_upload_without_target_is_400(rocklet):
    response = rocklet.client.post("/upload", files={"file": ("x", b"x")})
    assert response.status_code == 400
    assert "target_path" in response.json()["detail"]


def test_download_returns_the_raw_bytes(rocklet, tmp_path):
    target = tmp_path / "blob"
    payload = os.urandom(1_000_003)
    target.write_bytes(payload)
    response = rocklet.post("/download", path=str(target))
    assert response.status_code == 200
    assert response.headers["content-length"] == str(len(payload))
    assert response.content == payload
    assert rocklet.client.get("/download", params={"path": str(target)}).content == payload
    err = rocklet.error("/download", path=str(tmp_path / "missing"))
    assert err["class_path"] == "builtins.FileNotFoundError"


def test_list_dir(rocklet, tmp_path):
    (tmp_path / "file.txt").write_text("12345")
    (tmp_path / "sub").mkdir()
    (tmp_path / "link").symlink_to("file.txt")
    os.chmod(tmp_path / "file.txt", 0o640)
    listing = rocklet.ok("/list_dir", path=str(tmp_path))
    assert listing["path"] == str(tmp_path)
    entries = {e["name"]: e for e in listing["entries"]}
    assert [e["name"] for e in listing["entries"]] == ["file.txt", "link", "sub"]
    assert entries["file.txt"]["type"] == "file"
    assert entries["file.txt"]["size"] == 5
    assert entries["file.txt"]["mode"] == 0o640
    assert entries["file.txt"]["mtime"] > 0
    assert entries["sub"]["type"] == "dir"
    assert entries["link"] == {**entries["link"], "type": "symlink", "target": "file.txt"}
    err = rocklet.error("/list_dir", path=str(tmp_path / "file.txt"))
    assert err["class_path"] == "builtins.NotADirectoryError"
