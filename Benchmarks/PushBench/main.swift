// push-bench: the push senders' throughput and cost against the local providers (scripts/bench-push).
//
//   push-bench serve --dir D [--delay 50ms]
//       A local FCM and a local APNs, both HTTPS with HTTP/2 (a CA made at start), answering
//       every send after --delay; writes their addresses, the keys and the CA to D (endpoints.json,
//       fcm-service-account.json, AuthKey.p8, ca.pem) and runs until stdin closes.
//   push-bench send --dir D --provider fcm|apns [--count N] [--concurrency C]
//       N notifications through the sender the worker runs (FCMSender, APNsSender: ledger check,
//       token, send, outcome record), C in flight; prints one JSON line: sends per second, CPU
//       per send (user + system of this process), peak RSS.
import AsyncHTTPClient
import Foundation
import HTTPTesting
import NIOPosix
import NIOSSL
import Push
import Workers

struct Arguments {
    var values: [String: String] = [:]
    init(_ list: ArraySlice<String>) throws {
        var it = list.makeIterator()
        while let flag = it.next() {
            guard flag.hasPrefix("--"), let value = it.next() else { throw BenchError("expected --flag value pairs, found '\(flag)'") }
            values[String(flag.dropFirst(2))] = value
        }
    }
    func int(_ name: String, _ fallback: Int) throws -> Int {
        guard let text = values[name] else { return fallback }
        guard let n = Int(text), n > 0 else { throw BenchError("--\(name): expected a positive integer, found '\(text)'") }
        return n
    }
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

@main
enum PushBench {
    static func main() async {
        let args = Array(CommandLine.arguments.dropFirst())
        do {
            guard let mode = args.first else { throw BenchError("usage: push-bench serve|send ...") }
            let options = try Arguments(args.dropFirst())
            guard let dir = options.values["dir"] else { throw BenchError("--dir is required") }
            switch mode {
            case "serve": try await serve(dir: dir, delayMs: try options.int("delay-ms", 50))
            case "send":
                try await send(dir: dir, provider: options.values["provider"] ?? "fcm", count: try options.int("count", 5000),
                               concurrency: try options.int("concurrency", 64))
            default: throw BenchError("unknown mode '\(mode)' (serve, send)")
            }
        } catch {
            FileHandle.standardError.write(Data("push-bench: \(error)\n".utf8))
            exit(1)
        }
    }

    static func serve(dir: String, delayMs: Int) async throws {
        let certificate = try TestCertificate()
        let fcm = try await FakeFCM.start(project: "bench", tls: certificate)
        let apns = try await FakeAPNs.start(bundleID: "com.example.bench", certificate: certificate)
        fcm.setDelay(.milliseconds(delayMs))
        apns.setDelay(.milliseconds(delayMs))
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: dir + "/fcm-service-account.json", contents: Data(fcm.serviceAccountJSON))
        try apns.keyP8.write(toFile: dir + "/AuthKey.p8", atomically: true, encoding: .utf8)
        try certificate.writeTrustRoot(to: dir + "/ca.pem")
        let endpoints: [String: String] = [
            "fcm": fcm.server.baseURL, "fcm_project": fcm.project, "apns": apns.server.baseURL,
            "apns_bundle": apns.bundleID, "apns_team": apns.teamID, "apns_key": apns.keyID,
        ]
        try JSONSerialization.data(withJSONObject: endpoints).write(to: URL(fileURLWithPath: dir + "/endpoints.json"))
        print("ready")
        fflush(nil)
        // Until stdin closes (the bench script holds it open).
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                while let line = readLine() {
                    if line == "counts" {
                        print("fcm=\(fcm.sent.count) apns=\(apns.sent.count) fcm_h2=\(fcm.server.requests.filter(\.http2).count) apns_refused=\(apns.refused)")
                        fflush(nil)
                    }
                }
                c.resume()
            }
        }
        try await fcm.server.close()
        try await apns.server.close()
    }

    static func send(dir: String, provider: String, count: Int, concurrency: Int) async throws {
        let endpoints = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/endpoints.json"))) as? [String: String] ?? [:]
        let ledger = SentLedger()
        ledger.markLoaded()
        let sender: any ConcurrentTransform
        var client: HTTPClient?
        var apnsSender: APNsSender?
        var records: [InputRecord] = []
        records.reserveCapacity(count)
        switch provider {
        case "fcm":
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(dir + "/ca.pem"))
            var configuration = HTTPClient.Configuration()
            configuration.tlsConfiguration = tls
            let c = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration)
            client = c
            let account = try ServiceAccount.load(path: dir + "/fcm-service-account.json")
            sender = FCMSender(tokens: FCMAccessTokens(account: account, client: c), client: c, endpoint: endpoints["fcm"] ?? "", app: "bench", ledger: ledger)
            for i in 0..<count {
                let n = PushNotification(recipient: .token("bench-device-\(i % 1000)"), title: "Step \(i)", body: "Campaign 101 is 80% funded",
                                         data: ["campaign": "101"], collapseKey: "campaign-101", dedupeKey: "b\(i)")
                records.append(InputRecord(key: Array("token:bench-device-\(i % 1000)".utf8), value: n.fcmJSON(),
                                           headers: [RecordHeader("dedupe-key", "fcm:b\(i)")], timestamp: 1,
                                           origin: RecordOrigin(topic: "notifications.fcm", partition: 0, offset: Int64(i))))
            }
        case "apns":
            var options = PushOptions()
            options.apnsKeyFile = dir + "/AuthKey.p8"
            options.apnsKeyID = endpoints["apns_key"]
            options.apnsTeamID = endpoints["apns_team"]
            options.apnsBundleID = endpoints["apns_bundle"]
            options.apnsEndpoint = endpoints["apns"]
            options.apnsCAFile = dir + "/ca.pem"
            let s = try APNsSender.make(options: options, ledger: ledger, environment: [:])
            apnsSender = s
            sender = s
            for i in 0..<count {
                let token = String(format: "%064x", i % 1000)
                let n = PushNotification(recipient: .token(token), title: "Step \(i)", body: "Campaign 101 is 80% funded",
                                         data: ["campaign": "101"], collapseKey: "campaign-101", dedupeKey: "b\(i)")
                records.append(InputRecord(key: Array("token:\(token)".utf8), value: n.apnsJSON(),
                                           headers: [RecordHeader("apns-collapse-id", "campaign-101"), RecordHeader("dedupe-key", "apns:b\(i)")],
                                           timestamp: 1, origin: RecordOrigin(topic: "notifications.apns", partition: 0, offset: Int64(i))))
            }
        default: throw BenchError("--provider: fcm or apns, not '\(provider)'")
        }
        // One send first (the connection and the token), outside the measurement.
        _ = await sender.process(records[0])
        let before = usage()
        let started = ContinuousClock.now
        let sent = await withTaskGroup(of: Bool.self) { group in
            var next = 1
            var ok = 0
            for _ in 0..<min(concurrency, count - 1) {
                let r = records[next]
                next += 1
                group.addTask { await !sender.process(r).records.isEmpty }
            }
            while let result = await group.next() {
                if result { ok += 1 }
                if next < count {
                    let r = records[next]
                    next += 1
                    group.addTask { await !sender.process(r).records.isEmpty }
                }
            }
            return ok
        }
        let elapsed = ContinuousClock.now - started
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let after = usage()
        let cpu = (after.cpu - before.cpu) / Double(count - 1)
        print(#"{"tool":"swift","provider":"\#(provider)","sends":\#(count - 1),"sent":\#(sent),"seconds":\#(String(format: "%.3f", seconds)),"per_second":\#(String(format: "%.1f", Double(count - 1) / seconds)),"cpu_us_per_send":\#(String(format: "%.1f", cpu * 1e6)),"max_rss_mb":\#(String(format: "%.1f", Double(after.maxRSSKB) / 1024))}"#)
        await apnsSender?.shutdown()
        try await client?.shutdown()
    }

    /// CPU seconds (user + system) and peak RSS of this process.
    static func usage() -> (cpu: Double, maxRSSKB: Int) {
        var u = rusage()
        #if os(Linux)
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &u)
        #else
        getrusage(RUSAGE_SELF, &u)
        #endif
        let cpu = Double(u.ru_utime.tv_sec) + Double(u.ru_utime.tv_usec) / 1e6 + Double(u.ru_stime.tv_sec) + Double(u.ru_stime.tv_usec) / 1e6
        return (cpu, Int(u.ru_maxrss))
    }
}
