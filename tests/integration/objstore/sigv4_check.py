#!/usr/bin/python3
"""Checks the SigV4 signatures the s3:// object store sends against botocore's signer.

s3rver accepts any signature, so the signing is checked here instead: a fake S3 server records every
request the real client (sigv4_client, i.e. common/objstore_s3.c through libcurl's CURLOPT_AWS_SIGV4)
sends, answers it as S3 would, and then for each recorded request

  - botocore's S3SigV4Auth signs the same request (method, raw path and query, the headers curl said
    it signed, the body actually sent) with the same keys, region, session token and time (the client
    pins libcurl's clock to 2013-05-24T00:00:00Z), and its Authorization header must equal curl's
    byte for byte;
  - the path and query must already be in SigV4's canonical form (RFC 3986 encoding, sorted pairs,
    "key=" for empty values), because S3 canonicalises what it receives while curl signs it verbatim;
  - x-amz-content-sha256 must be the SHA-256 of the body sent, and every x-amz-* header must be signed.

It also checks the multipart upload's shape (parts in flight at once, parts that reassemble into the
file, a complete body listing every ETag in order) and what the client parsed from the answers.

Then the client runs twice more against a misbehaving server: "flaky" answers the first try of every
request with 503 SlowDown (part uploads instead lose their connection), and every operation must still
succeed through retries; "broken-part" refuses part 3 with a 400, and the upload must fail without
retrying it and abort the multipart upload (DELETE ?uploadId=…) instead of completing it.

Last, resuming after a crash as real S3 answers it (s3rver has no ListParts): with a journal beside the
file that records parts 1 and 2 of an upload, "resume-alive" answers ListParts with 200 and the client
must send only parts 3 and 4 and complete with all four ETags; "resume-gone" answers 404 NoSuchUpload
and the client must start a new upload, sending nothing to the old one.

usage: sigv4_check.py SIGV4_CLIENT   (run by ctest; needs Debian's python3-botocore)
"""
import datetime
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest.mock
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote

import botocore
import botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

ACCESS_KEY = "AKIDEXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
SESSION_TOKEN = "FQoGZXIvYXdzEXAMPLE/token+with=chars"
REGION = "eu-central-1"
UPLOAD_ID = "2~abc/def+ghi="  # needs %2F, %2B and %3D in the query
PREFIX = "tenant 1/ckpts"
FIXED_DATE = "20130524T000000Z"  # sigv4_client pins libcurl's clock here

requests = []
lock = threading.Lock()
parts_in_flight = 0
max_parts_in_flight = 0
stored = {}  # object path -> body, for HEAD and GET
part_bodies = {}  # (object path, part number) -> body of the part's accepted upload
mode = "clean"  # or "flaky", "broken-part", "resume-alive", "resume-gone"
tries = {}  # (method, target) -> times seen


class Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_any(self):
        global parts_in_flight, max_parts_in_flight
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length) if length else b""
        with lock:
            requests.append({"method": self.command, "target": self.path, "headers": list(self.headers.items()),
                             "body": body})
        path, _, query = self.path.partition("?")
        with lock:
            seen = tries.get((self.command, self.path), 0)
            tries[(self.command, self.path)] = seen + 1
        if mode == "flaky" and seen == 0:
            if "partNumber=" in query:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)  # a lost connection, no answer
                return
            return self.reply(503, b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>")
        if mode == "broken-part" and query.startswith("partNumber=3&"):
            return self.reply(400, b"<Error><Code>InvalidPart</Code><Message>part 3 refused</Message></Error>")
        if self.command == "GET" and query.startswith("uploadId="):  # ListParts
            if mode == "resume-gone":
                return self.reply(404, b"<Error><Code>NoSuchUpload</Code><Message>upload aborted</Message></Error>")
            return self.reply(200, b"<ListPartsResult><IsTruncated>false</IsTruncated></ListPartsResult>")
        if self.command == "POST" and query == "uploads=":
            xml = f"<InitiateMultipartUploadResult><UploadId>{UPLOAD_ID}</UploadId></InitiateMultipartUploadResult>"
            return self.reply(200, xml.encode())
        if self.command == "PUT" and query.startswith("partNumber="):
            with lock:
                parts_in_flight += 1
                max_parts_in_flight = max(max_parts_in_flight, parts_in_flight)
            time.sleep(0.25)  # long enough for the other threads' parts to overlap
            with lock:
                parts_in_flight -= 1
            number = query.split("&")[0].split("=")[1]
            with lock:
                part_bodies[(path, int(number))] = body
            return self.reply(200, headers=[("ETag", f'"etag-{number}"')])
        if self.command == "POST" and query.startswith("uploadId="):
            stored[path] = b"".join(body for (p, _), body in sorted(part_bodies.items()) if p == path)
            return self.reply(200, b"<CompleteMultipartUploadResult><ETag>\"x-3\"</ETag></CompleteMultipartUploadResult>")
        if self.command == "PUT":
            stored[path] = body
            return self.reply(200, headers=[("ETag", '"single"')])
        if self.command == "GET" and "list-type=2" in query:
            # Two pages, keys out of order, with an XML entity and the store's prefix, as S3 sends them;
            # the continuation token needs encoding in the second request.
            if "continuation-token=" not in query:
                xml = ("<ListBucketResult><IsTruncated>true</IsTruncated>"
                       "<NextContinuationToken>page/2+=</NextContinuationToken>"
                       f"<Contents><Key>{PREFIX}/dir/z.bin</Key><Size>3</Size></Contents></ListBucketResult>")
            else:
                xml = ("<ListBucketResult><IsTruncated>false</IsTruncated>"
                       f"<Contents><Key>{PREFIX}/dir/a&amp;b.bin</Key><Size>5</Size></Contents></ListBucketResult>")
            return self.reply(200, xml.encode())
        if self.command in ("HEAD", "GET"):
            data = stored.get(path)
            if data is None:
                return self.reply(404, b"<Error><Code>NoSuchKey</Code></Error>")
            meta = hashlib.sha256(data).hexdigest()
            rng = self.headers.get("Range")
            if self.command == "GET" and rng:
                a, b = rng.removeprefix("bytes=").split("-")
                return self.reply(206, data[int(a):int(b) + 1])
            if self.command == "HEAD":
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("x-amz-meta-sha256", meta)
                self.end_headers()
                return
            return self.reply(200, data, headers=[("x-amz-meta-sha256", meta)])
        if self.command == "DELETE":
            stored.pop(path, None)
            return self.reply(204)
        return self.reply(400)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = handle_any


failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what, file=sys.stderr)


def header(req, name):
    for k, v in req["headers"]:
        if k.lower() == name:
            return v
    return None


class FixedTime(datetime.datetime):
    fixed = None

    @classmethod
    def utcnow(cls):
        return cls.fixed


def botocore_authorization(req, signed_names, amz_date):
    """The Authorization header botocore computes for the request as it was received."""
    # botocore adds host, x-amz-date, x-amz-content-sha256 (the body's real hash) and the session
    # token itself; the other headers are those curl says it signed, with the values it sent.
    own = {"host", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token"}
    headers = {k: v for k, v in req["headers"] if k.lower() in signed_names and k.lower() not in own}
    aws = AWSRequest(method=req["method"], url=f"http://{header(req, 'host')}{req['target']}",
                     data=req["body"], headers=headers)
    FixedTime.fixed = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ")
    with unittest.mock.patch.object(botocore.auth.datetime, "datetime", FixedTime):
        botocore.auth.S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY, SESSION_TOKEN), "s3", REGION).add_auth(aws)
    return aws.headers["Authorization"]


def canonical(s, safe):
    return quote(unquote(s), safe=safe) == s


def check_signature(i, req):
    what = f"request {i} {req['method']} {req['target']}"
    auth = header(req, "authorization") or ""
    m = re.fullmatch(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/s3/aws4_request, "
                     r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})", auth)
    check(m is not None, f"{what}: Authorization header has SigV4's shape: {auth!r}")
    if not m:
        return
    check(m.group(1) == ACCESS_KEY and m.group(3) == REGION, f"{what}: credential scope {auth}")
    amz_date = header(req, "x-amz-date") or ""
    check(amz_date.startswith(m.group(2)), f"{what}: X-Amz-Date {amz_date} matches the scope date")
    check(amz_date == FIXED_DATE, f"{what}: signed at the client's fixed time ({amz_date})")
    signed = m.group(4).split(";")
    check(signed == sorted(signed), f"{what}: SignedHeaders sorted")
    for name, _ in req["headers"]:
        lname = name.lower()
        if lname.startswith("x-amz-") or lname in ("host", "range", "content-type", "content-md5"):
            check(lname in signed, f"{what}: header {lname} is sent but not signed")
    check(header(req, "x-amz-content-sha256") == hashlib.sha256(req["body"]).hexdigest(),
          f"{what}: x-amz-content-sha256 is the body's SHA-256")
    check(header(req, "x-amz-security-token") == SESSION_TOKEN, f"{what}: session token sent")
    path, _, query = req["target"].partition("?")
    check(canonical(path, "/-_.~"), f"{what}: path is RFC 3986-encoded")
    pairs = [p.partition("=") for p in query.split("&")] if query else []
    for k, eq, v in pairs:
        check(eq == "=" and canonical(k, "-_.~") and canonical(v, "-_.~"),
              f"{what}: query pair {k}{eq}{v} is canonical")
    check([(k, v) for k, _, v in pairs] == sorted((k, v) for k, _, v in pairs), f"{what}: query sorted")
    expected = botocore_authorization(req, set(signed), amz_date)
    check(expected == auth, f"{what}: signature differs from botocore's\n  curl:     {auth}\n  botocore: {expected}")


OBJ = "/sig-bucket/tenant%201/ckpts/dir/a%20b%2Bc~%281%29%3D%C3%A9.bin"
BIG = "/sig-bucket/tenant%201/ckpts/dir/big.bin"
UPLOAD = "uploadId=2~abc%2Fdef%2Bghi%3D"


def run_client(client, run_mode, path, prepare=None):
    """Runs the client against a fresh fake server in `run_mode` (`prepare` sets up the server's
    state); returns its completed process."""
    global mode, parts_in_flight, max_parts_in_flight
    mode = run_mode
    requests.clear()
    stored.clear()
    part_bodies.clear()
    tries.clear()
    if prepare:
        prepare()
    parts_in_flight = max_parts_in_flight = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    out = subprocess.run([client, endpoint, path], capture_output=True, text=True, timeout=60)
    server.shutdown()
    server.server_close()
    sys.stderr.write(out.stderr)
    return out


def check_clean_run(out, data):
    check(out.returncode == 0, f"sigv4_client exit status {out.returncode}")
    for i, req in enumerate(requests):
        check_signature(i, req)
    methods = [(r["method"], r["target"]) for r in requests]
    check(("PUT", OBJ) in methods, f"the awkward key is encoded as {OBJ}: {methods}")
    put = next((r for r in requests if r["target"] == OBJ and r["method"] == "PUT"), None)
    check(put is not None and header(put, "x-amz-meta-sha256") == hashlib.sha256(b"signed body").hexdigest(),
          "x-amz-meta-sha256 carries the object's checksum")
    create = [r for r in requests if r["target"] == BIG + "?uploads="]
    check(len(create) == 1 and header(create[0], "x-amz-meta-sha256") == hashlib.sha256(data).hexdigest(),
          "multipart create carries the whole file's checksum")
    parts = [r for r in requests if r["target"].startswith(BIG + "?partNumber=")]
    check(sorted(r["target"] for r in parts) == [f"{BIG}?partNumber={n}&{UPLOAD}" for n in range(1, 5)],
          f"four parts with the encoded upload id: {[r['target'] for r in parts]}")
    check(max_parts_in_flight >= 2, f"parts are uploaded in parallel (at most {max_parts_in_flight} at once)")
    complete = [r for r in requests if r["target"] == f"{BIG}?{UPLOAD}" and r["method"] == "POST"]
    expected_xml = "<CompleteMultipartUpload>" + "".join(
        f'<Part><PartNumber>{n}</PartNumber><ETag>"etag-{n}"</ETag></Part>' for n in range(1, 5)) + \
        "</CompleteMultipartUpload>"
    check(len(complete) == 1 and complete[0]["body"].decode() == expected_xml, "complete lists every part in order")
    check(stored.get(BIG) == data, "the parts reassemble into the file")
    lists = [r for r in requests if "list-type=2" in r["target"]]
    check([r["target"] for r in lists] == [
        "/sig-bucket?list-type=2&prefix=tenant%201%2Fckpts%2Fdir%2F",
        "/sig-bucket?continuation-token=page%2F2%2B%3D&list-type=2&prefix=tenant%201%2Fckpts%2Fdir%2F"],
        f"list queries, second page by continuation token: {[r['target'] for r in lists]}")
    check(out.stdout.count("list ") == 2 and "list dir/a&b.bin 5" in out.stdout and
          out.stdout.find("list dir/a&b.bin 5") < out.stdout.find("list dir/z.bin 3"),
          f"listing unescaped, prefix stripped, sorted: {out.stdout!r}")
    check(f"stat {len(data)} {hashlib.sha256(data).hexdigest()}" in out.stdout, f"stat parsed: {out.stdout!r}")
    ranged = [r for r in requests if header(r, "range")]
    check(len(ranged) == 1 and header(ranged[0], "range") == "bytes=5-14", "ranged GET asks for bytes=5-14")
    check(f"range {data[5:15].hex()}" in out.stdout, f"range read returns bytes 5..14: {out.stdout!r}")
    check(("DELETE", OBJ) in methods, "delete sent")
    print(f"clean: {len(requests)} requests checked against botocore {botocore.__version__}; "
          f"at most {max_parts_in_flight} parts in flight")


def check_flaky_run(out, data):
    check(out.returncode == 0, f"flaky: every operation succeeds through retries (exit {out.returncode})")
    for i, req in enumerate(requests):
        check_signature(i, req)  # a retried request is signed afresh, and correctly
    once = [k for k, n in tries.items() if n != 2]
    check(not once, f"flaky: every request tried exactly twice (one failure, one success): {once}")
    check(stored.get(BIG) == data, "flaky: the parts still reassemble into the file")
    check(f"range {data[5:15].hex()}" in out.stdout, "flaky: the ranged read still returns its bytes")
    print(f"flaky: {len(requests)} requests, {len(tries)} distinct, all retried once")


def check_broken_part_run(out):
    check(out.returncode != 0 and "part 3 refused" in out.stderr,
          f"broken-part: put_file fails with S3's message: {out.stderr!r}")
    part3 = [k for k in tries if k[0] == "PUT" and "partNumber=3&" in k[1]]
    check(len(part3) == 1 and tries[part3[0]] == 1, "broken-part: a 400 is not retried")
    check(("DELETE", f"{BIG}?{UPLOAD}") in tries, "broken-part: the multipart upload is aborted")
    check(("POST", f"{BIG}?{UPLOAD}") not in tries, "broken-part: the upload is not completed")
    print("broken-part: failed without retrying the 400, upload aborted")


PART = 64 * 1024
GONE_UPLOAD = "gone-upload-id"


def write_journal(path, data, upload_id):
    """The journal a client killed after parts 1 and 2 of `path`'s upload would have left."""
    parts = [{"part": n, "etag": f'"etag-{n}"', "sha256": hashlib.sha256(data[(n - 1) * PART:n * PART]).hexdigest()}
             for n in (1, 2)]
    journal = {"bucket": "sig-bucket", "key": f"{PREFIX}/dir/big.bin", "size": len(data),
               "sha256": hashlib.sha256(data).hexdigest(), "part_size": PART, "upload_id": upload_id, "parts": parts}
    journal_path = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".whet-upload")
    with open(journal_path, "w") as f:
        json.dump(journal, f)
    return journal_path


def check_resume_alive_run(client, path, data):
    journal_path = write_journal(path, data, UPLOAD_ID)

    def server_has_first_parts():
        for n in (1, 2):
            part_bodies[(BIG, n)] = data[(n - 1) * PART:n * PART]
    out = run_client(client, "resume-alive", path, server_has_first_parts)
    check(out.returncode == 0, f"resume-alive: exit status {out.returncode}")
    for i, req in enumerate(requests):
        check_signature(i, req)
    targets = [(r["method"], r["target"]) for r in requests]
    check(("GET", f"{BIG}?{UPLOAD}") in targets, "resume-alive: ListParts asked about the journaled upload")
    check(("POST", BIG + "?uploads=") not in targets, "resume-alive: no new upload created")
    parts = sorted(t for m, t in targets if t.startswith(BIG + "?partNumber="))
    check(parts == [f"{BIG}?partNumber={n}&{UPLOAD}" for n in (3, 4)], f"resume-alive: only parts 3 and 4 sent: {parts}")
    complete = [r for r in requests if r["target"] == f"{BIG}?{UPLOAD}" and r["method"] == "POST"]
    expected_xml = "<CompleteMultipartUpload>" + "".join(
        f'<Part><PartNumber>{n}</PartNumber><ETag>"etag-{n}"</ETag></Part>' for n in range(1, 5)) + \
        "</CompleteMultipartUpload>"
    check(len(complete) == 1 and complete[0]["body"].decode() == expected_xml,
          "resume-alive: complete lists the journaled and the new parts in order")
    check(stored.get(BIG) == data, "resume-alive: the object is the file")
    check(not os.path.exists(journal_path), "resume-alive: the journal is removed once complete")
    print("resume-alive: parts 1-2 taken from the journal, 3-4 sent")


def check_resume_gone_run(client, path, data):
    journal_path = write_journal(path, data, GONE_UPLOAD)
    out = run_client(client, "resume-gone", path)
    check(out.returncode == 0, f"resume-gone: exit status {out.returncode}")
    for i, req in enumerate(requests):
        check_signature(i, req)
    targets = [(r["method"], r["target"]) for r in requests]
    check(("GET", f"{BIG}?uploadId={GONE_UPLOAD}") in targets, "resume-gone: ListParts asked about the old upload")
    check(not any(GONE_UPLOAD in t and "partNumber=" in t for _, t in targets),
          "resume-gone: no part sent to the old upload")
    check(("POST", BIG + "?uploads=") in targets, "resume-gone: a new upload created")
    parts = sorted(t for m, t in targets if t.startswith(BIG + "?partNumber="))
    check(parts == [f"{BIG}?partNumber={n}&{UPLOAD}" for n in range(1, 5)], f"resume-gone: all four parts sent: {parts}")
    check(stored.get(BIG) == data, "resume-gone: the object is the file")
    check(not os.path.exists(journal_path), "resume-gone: the journal is removed once complete")
    print("resume-gone: NoSuchUpload from ListParts, started over")


def main():
    client = sys.argv[1]
    with tempfile.NamedTemporaryFile(prefix="sigv4-") as f:
        data = os.urandom(200 * 1024 + 123)  # 4 parts of 64 KiB, the last short
        f.write(data)
        f.flush()
        check_clean_run(run_client(client, "clean", f.name), data)
        check_flaky_run(run_client(client, "flaky", f.name), data)
        check_broken_part_run(run_client(client, "broken-part", f.name))
        check_resume_alive_run(client, f.name, data)
        check_resume_gone_run(client, f.name, data)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
