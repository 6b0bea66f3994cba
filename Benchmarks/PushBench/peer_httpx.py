"""The peer of push-bench send: a short Python sender on httpx with HTTP/2, against the same local
providers (run through scripts/bench-push).

What it does per notification is what a small team would write: FCM, an OAuth access token from
the service account (an RS256 assertion exchanged once, then reused) and POST messages:send;
APNs, one ES256 provider token reused, POST /3/device/TOKEN with the apns-* headers. C sends in
flight (a semaphore), one HTTP/2 connection per provider. No ledger, no retries: it does less than
the Swift sender. Prints one JSON line like push-bench's.

    python3 peer_httpx.py --dir D --provider fcm|apns [--count N] [--concurrency C]
"""
import argparse
import asyncio
import base64
import json
import resource
import ssl
import time

import httpx
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, utils


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(header: dict, claims: dict, sign) -> str:
    head = b64(json.dumps(header, separators=(",", ":")).encode()) + "." + b64(json.dumps(claims, separators=(",", ":")).encode())
    return head + "." + b64(sign(head.encode()))


def fcm_body(i: int) -> bytes:
    return json.dumps({"message": {
        "token": f"bench-device-{i % 1000}",
        "notification": {"title": f"Step {i}", "body": "Campaign 101 is 80% funded"},
        "data": {"campaign": "101", "dedupe_key": f"b{i}"},
        "android": {"collapse_key": "campaign-101"},
        "apns": {"headers": {"apns-collapse-id": "campaign-101"}}}}, separators=(",", ":")).encode()


def apns_body(i: int) -> bytes:
    return json.dumps({"aps": {"alert": {"title": f"Step {i}", "body": "Campaign 101 is 80% funded"}, "thread-id": "campaign-101"},
                       "campaign": "101", "dedupe_key": f"b{i}"}, separators=(",", ":")).encode()


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--provider", choices=["fcm", "apns"], default="fcm")
    p.add_argument("--count", type=int, default=5000)
    p.add_argument("--concurrency", type=int, default=64)
    a = p.parse_args()
    endpoints = json.load(open(f"{a.dir}/endpoints.json"))
    context = ssl.create_default_context(cafile=f"{a.dir}/ca.pem")
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(http2=True, verify=context, limits=limits, timeout=30) as client:
        if a.provider == "fcm":
            account = json.load(open(f"{a.dir}/fcm-service-account.json"))
            key = serialization.load_pem_private_key(account["private_key"].encode(), password=None)
            now = int(time.time())
            assertion = jwt({"alg": "RS256", "typ": "JWT"},
                            {"iss": account["client_email"], "scope": "https://www.googleapis.com/auth/firebase.messaging",
                             "aud": account["token_uri"], "iat": now, "exp": now + 3600},
                            lambda m: key.sign(m, padding.PKCS1v15(), hashes.SHA256()))
            r = await client.post(account["token_uri"], data={
                "grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": assertion})
            r.raise_for_status()
            headers = {"authorization": "Bearer " + r.json()["access_token"], "content-type": "application/json; charset=utf-8"}
            url = f"{endpoints['fcm']}/v1/projects/{endpoints['fcm_project']}/messages:send"

            async def send(i):
                r = await client.post(url, content=fcm_body(i), headers=headers)
                return r.status_code == 200 and r.http_version == "HTTP/2"
        else:
            key = serialization.load_pem_private_key(open(f"{a.dir}/AuthKey.p8", "rb").read(), password=None)

            def es256(m):
                r, s = utils.decode_dss_signature(key.sign(m, ec.ECDSA(hashes.SHA256())))
                return r.to_bytes(32, "big") + s.to_bytes(32, "big")
            token = jwt({"alg": "ES256", "kid": endpoints["apns_key"]}, {"iss": endpoints["apns_team"], "iat": int(time.time())}, es256)
            base = endpoints["apns"]

            async def send(i):
                headers = {"authorization": "bearer " + token, "apns-topic": endpoints["apns_bundle"], "apns-push-type": "alert",
                           "apns-priority": "10", "apns-expiration": str(int(time.time()) + 86400), "apns-collapse-id": "campaign-101",
                           "content-type": "application/json"}
                r = await client.post(f"{base}/3/device/{i % 1000:064x}", content=apns_body(i), headers=headers)
                return r.status_code == 200 and r.http_version == "HTTP/2"

        await send(0)  # the connection, outside the measurement
        semaphore = asyncio.Semaphore(a.concurrency)

        async def one(i):
            async with semaphore:
                return await send(i)
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        results = await asyncio.gather(*(one(i) for i in range(1, a.count)))
        seconds = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / (a.count - 1)
    print(json.dumps({"tool": "python-httpx", "provider": a.provider, "sends": a.count - 1, "sent": sum(results),
                      "seconds": round(seconds, 3), "per_second": round((a.count - 1) / seconds, 1),
                      "cpu_us_per_send": round(cpu * 1e6, 1), "max_rss_mb": round(after.ru_maxrss / 1024, 1)}))


asyncio.run(main())
