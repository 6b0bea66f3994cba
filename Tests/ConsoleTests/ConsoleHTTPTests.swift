import Foundation
#if canImport(Glibc)
import Glibc
#endif
import HTTPTesting
import HTTPTypes
import HummingbirdTesting
import Kafka
import Logging
import NIOCore
import Operations
import Pipeline
import ServiceLifecycle
import Testing
import Workers
@testable import Console

/// The console over plain HTTP: its own server on 127.0.0.1, port 0, in this process, over
/// librdkafka's mock cluster (prices.raw with 10 records, the group of prices-decode committed
/// at 5), asked by a client that sets any Host, Origin or Sec-Fetch-Site.
struct ConsoleUnderTest {
    static let topology = """
        topics:
          - {name: prices.raw, partitions: 2}
          - {name: prices.ticks, partitions: 1}
          - {name: pipeline.dead-letters, partitions: 1}
        stages:
          - {name: prices-decode, chain: [prices.decode], inputs: [prices.raw], outputs: {ticks: prices.ticks}, dead-letter-topic: pipeline.dead-letters}
        """

    let service: ConsoleService
    let port: Int
    /// `Host` of a request to the console's own address.
    var own: String { "127.0.0.1:\(port)" }
    var csrf: String { service.csrf }

    /// Writes a dead letter of prices-decode for each input to pipeline.dead-letters, partition 0,
    /// as the runtime writes them (the original record's timestamp).
    func writeDeadLetters(
        _ inputs: [InputRecord], failure: DecodeFailure = DecodeFailure(field: "trade_price", reason: .invalidValue, detail: "not a number")
    ) async throws {
        let producer = try KafkaProducer(configuration: ProducerConfiguration(kafka: service.kafka))
        let letters = inputs.map { input in
            let d = DeadLetter(stage: "prices-decode", transform: "prices.decode", input: input, failure: failure)
            return ProducerRecord(
                topic: "pipeline.dead-letters", partition: 0, key: d.key, value: d.value,
                headers: d.recordHeaders.map { KafkaHeader(key: $0.name, value: $0.value) }, timestamp: d.timestamp)
        }
        #expect(try await producer.send(letters).allSatisfy { $0.error == nil })
        await producer.close()
    }

    /// Runs `body` against a console started for it, then stops the console.
    static func with(
        token: String? = nil, access: ConsoleAccess? = nil, allowedHosts: [String] = [], idleTimeout: Duration = .seconds(15),
        _ body: (ConsoleUnderTest) async throws -> Void
    ) async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        for (topic, partitions) in [("prices.raw", 2), ("prices.ticks", 1), ("pipeline.dead-letters", 1), ("pipeline.console.redrives", 1)] {
            try mock.createTopic(topic, partitions: partitions)
        }
        let kafka = KafkaConfiguration(bootstrapServers: [mock.bootstrapServers])
        let producer = try KafkaProducer(configuration: ProducerConfiguration(kafka: kafka))
        #expect(try await producer.send((0..<10).map { ProducerRecord(topic: "prices.raw", partition: 0, value: Array("v\($0)".utf8)) })
            .allSatisfy { $0.error == nil })
        await producer.close()
        let topology = try Topology.parse(Self.topology)
        var config = ConsumerConfiguration(kafka: kafka, groupID: topology.stages[0].group)
        config.autoCommit = false
        let committer = try KafkaConsumer(configuration: config)
        try await committer.commit([TopicPartitionOffset("prices.raw", 0, offset: 5)])
        try await committer.close(deadline: .seconds(5))

        var settings = ConsoleSettings()
        settings.port = 0
        settings.access = access ?? token.map { ConsoleAccess.single($0) } ?? .open
        settings.allowedHosts = allowedHosts
        settings.idleTimeout = idleTimeout
        var logger = Logger(label: "console-under-test")
        logger.logLevel = .warning
        let service = try ConsoleService(settings: settings, state: ConsoleState(topology: topology), kafka: kafka, logger: logger)
        let group = ServiceGroup(configuration: .init(services: [service], gracefulShutdownSignals: [], logger: logger))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            var ports = service.listening.makeAsyncIterator()
            let port = try #require(await ports.next())
            do {
                try await body(ConsoleUnderTest(service: service, port: port))
            } catch {
                await group.triggerGracefulShutdown()
                throw error
            }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
        withExtendedLifetime(mock) {}
    }

    enum Host {
        /// The console's own address, as a browser that opened it sends.
        case own
        case none
        case name(String)
    }

    struct Answer {
        var status: Int
        var headers: HTTPFields
        var body: String
        /// The body with the pages' escapes undone (`&#39;` is `'`).
        var text: String {
            body.replacingOccurrences(of: "&#39;", with: "'").replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&amp;", with: "&")
        }
    }

    /// One request on a connection of its own (a refused request may close it).
    func request(
        _ method: HTTPRequest.Method = .get, _ path: String, host: Host = .own, headers: HTTPFields = [:], form: String? = nil
    ) async throws -> Answer {
        let authority: String? = switch host {
        case .own: own
        case .none: nil
        case .name(let name): name
        }
        var headers = headers
        if form != nil { headers[.contentType] = "application/x-www-form-urlencoded" }
        let client = TestClient(host: "127.0.0.1", port: port, configuration: .init(timeout: .seconds(60)))
        client.connect()
        do {
            let response = try await client.execute(TestClient.Request(path, method: method, authority: authority, headers: headers,
                                                                       body: form.map { ByteBuffer(string: $0) }))
            try await client.shutdown()
            return Answer(status: response.status.code, headers: response.headers, body: response.body.map { String(buffer: $0) } ?? "")
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// A form value, percent-encoded (`+` and `&` too).
    static func encoded(_ s: String) -> String {
        s.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? ""
    }

    /// A path segment, percent-encoded where a path needs it (`+` is itself in a path).
    static func segment(_ s: String) -> String {
        s.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~+"))) ?? ""
    }
}

@Suite(.serialized, .timeLimit(.minutes(5))) struct ConsoleHTTPTests {
    typealias Console = ConsoleUnderTest

    /// Whole numbers at and beyond every edge a request can reach: Int64's ends, 2^63 and more
    /// as text, the special offsets and times -1 and -2, and things that are not numbers.
    static let extremes = [
        "9223372036854775807", "-9223372036854775808", "9223372036854775806", "9223372036854775808", "-9223372036854775809",
        "18446744073709551616", "99999999999999999999999999999999999999", "-1", "-2", "0", "1", "2147483647", "2147483648",
        "1000000000000000", "1000000000000001", "-1000000000000000", "-1000000000000001", "253402300799999", "253402300800000",
        "abc", "", "+5", "1e3", "0x10", "5.0", "NaN", "١٢", "12abc",
    ]

    /// One place a request carries a number, the range it must be in (nil: any whole number
    /// not refused for its size), and the request that carries it.
    struct Place: Sendable, CustomStringConvertible {
        var description: String
        var range: ClosedRange<Int64>?
        /// In the path: an empty value makes another path (404), not an empty number.
        var inPath = false
        /// An optional filter: an empty value is no filter (the form sends empty fields).
        var emptyIsAbsent = false
        var request: @Sendable (Console, String) async throws -> Console.Answer
    }

    static let places: [Place] = {
        let e = Console.encoded
        func get(_ name: String, _ range: ClosedRange<Int64>?, inPath: Bool = false, _ path: @escaping @Sendable (String) -> String) -> Place {
            Place(description: name, range: range, inPath: inPath) { c, v in try await c.request(.get, path(v)) }
        }
        func post(_ name: String, _ range: ClosedRange<Int64>?, _ path: String, _ form: @escaping @Sendable (String) -> String) -> Place {
            Place(description: name, range: range) { c, v in try await c.request(.post, path, form: "csrf=\(c.csrf)&" + form(v)) }
        }
        func filter(_ place: Place) -> Place {
            var optional = place
            optional.emptyIsAbsent = true
            return optional
        }
        return [
            get("stage tier", 0...Int64(LagHistory.tiers.count - 1)) { "/stages/prices-decode?tier=\(e($0))" },
            get("dead letter partition", NumberBounds.partition, inPath: true) { "/dead-letters/\(Console.segment($0))/0" },
            get("dead letter offset", NumberBounds.offset, inPath: true) { "/dead-letters/0/\(Console.segment($0))" },
            get("find partition", NumberBounds.partition) { "/find?topic=prices.raw&by=offset&value=\(e($0)):0" },
            get("find offset", NumberBounds.offset) { "/find?topic=prices.raw&by=offset&value=0:\(e($0))" },
            get("find time", NumberBounds.epochMillis) { "/find?topic=prices.raw&by=time&value=\(e($0))" },
            get("reset shift", NumberBounds.shift) { "/stages/prices-decode/reset?topic=prices.raw&to=shift&value=\(e($0))" },
            get("reset offset", NumberBounds.offset) { "/stages/prices-decode/reset?topic=prices.raw&to=offset&value=\(e($0))" },
            get("reset time", NumberBounds.epochMillis) { "/stages/prices-decode/reset?topic=prices.raw&to=datetime&value=\(e($0))" },
            post("reset shift (POST)", NumberBounds.shift, "/stages/prices-decode/reset") { "topic=prices.raw&to=shift&value=\(e($0))" },
            post("redrive expected count", 0...Int64.max, "/dead-letters/redrive") { "expected=\(e($0))" },
            filter(get("dead letters since", NumberBounds.epochMillis) { "/dead-letters?since=\(e($0))" }),
            filter(get("dead letters until", NumberBounds.epochMillis) { "/dead-letters?until=\(e($0))" }),
            filter(post("redrive preview since", NumberBounds.epochMillis, "/dead-letters/redrive/preview") { "since=\(e($0))" }),
            filter(post("redrive until", NumberBounds.epochMillis, "/dead-letters/redrive") { "expected=0&until=\(e($0))" }),
            filter(get("topic partition", NumberBounds.partition) { "/topics/prices.raw?partition=\(e($0))" }),
            filter(get("topic limit", TopicFilter.limits) { "/topics/prices.raw?limit=\(e($0))" }),
            get("record partition", NumberBounds.partition, inPath: true) { "/topics/prices.raw/\(Console.segment($0))/0" },
            get("record offset", NumberBounds.offset, inPath: true) { "/topics/prices.raw/0/\(Console.segment($0))" },
            get("tail partition", NumberBounds.partition) { "/api/topics/prices.raw/tail?after=\(e($0)):0" },
            get("tail offset", NumberBounds.offset) { "/api/topics/prices.raw/tail?after=0:\(e($0))" },
        ]
    }()

    /// Every place a request carries a number, fed every extreme: a number out of its range,
    /// or no number at all, is answered 400 naming what was wrong; one in range is never 400
    /// nor 5xx; nothing stops the console.
    @Test func everyNumberInARequestIsRangeChecked() async throws {
        try await Console.with { console in
            for place in Self.places {
                for value in Self.extremes where !((place.inPath || place.emptyIsAbsent) && value.isEmpty) {
                    let inRange = Int64(value).map { n in place.range?.contains(n) ?? true } ?? false
                    // (No extreme is an ISO-8601 time, which the time fields also take.)
                    let answer = try await place.request(console, value)
                    if inRange {
                        #expect(answer.status < 500 && answer.status != 400, "\(place) '\(value)': \(answer.status) \(answer.body.prefix(300))")
                    } else {
                        #expect(answer.status == 400, "\(place) '\(value)': \(answer.status) \(answer.body.prefix(300))")
                        #expect(answer.text.contains("'\(value)' is not"), "\(place) '\(value)': says what was wrong: \(answer.text.prefix(300))")
                    }
                }
            }
            // Still serving.
            #expect(try await console.request(.get, "/healthz").status == 200)
        }
    }

    /// An offset past a partition's end, before its start or in an empty partition is answered
    /// at once (404 for the record page, no match for Find), not after the reader's idle timeout
    /// with 503: the read starts at the last record the broker lists and ends at the end the
    /// fetch reports.
    @Test func anOffsetWithNoRecordIsAnsweredAtOnce() async throws {
        try await Console.with { console in
            for (path, status, says) in [
                ("/topics/prices.raw/0/10", 404, "no record"), ("/topics/prices.raw/0/1000000", 404, "no record"),
                ("/topics/prices.raw/1/0", 404, "no record"), ("/topics/prices.raw/0/9", 200, "v9"),
                ("/find?topic=prices.raw&by=offset&value=0:10", 200, "0 found"), ("/find?topic=prices.raw&by=offset&value=0:1000000", 200, "0 found"),
                ("/find?topic=prices.raw&by=offset&value=1:3", 200, "0 found"), ("/find?topic=prices.raw&by=offset&value=0:4", 200, "1 found"),
            ] {
                let started = ContinuousClock.now
                let answer = try await console.request(.get, path)
                let took = ContinuousClock.now - started
                #expect(answer.status == status && answer.text.contains(says), "\(path): \(answer.status) \(answer.text.prefix(300))")
                #expect(took < .seconds(3), "\(path): answered after \(took)")
            }
        }
    }

    /// The three requests that stopped the console (an overflow trap), each answered 400.
    @Test func theRequestsThatStoppedTheConsoleAreRefused() async throws {
        try await Console.with { console in
            for path in [
                "/dead-letters/0/9223372036854775807",
                "/find?topic=prices.raw&by=offset&value=0:9223372036854775807",
                "/stages/prices-decode/reset?topic=prices.raw&to=shift&value=9223372036854775807",
            ] {
                let answer = try await console.request(.get, path)
                #expect(answer.status == 400, "\(path): \(answer.status)")
                #expect(answer.text.contains("'9223372036854775807' is not"), "\(path): \(answer.text.prefix(400))")
            }
            #expect(try await console.request(.get, "/healthz").status == 200)
        }
    }

    /// Negative times would reach the broker as ListOffsets' latest (-1) and earliest (-2).
    @Test func negativeTimesAreRefusedNotSentAsLatestOrEarliest() async throws {
        try await Console.with { console in
            for value in ["-1", "-2", "-1000000000000"] {
                for path in ["/find?topic=prices.raw&by=time&value=\(value)", "/stages/prices-decode/reset?topic=prices.raw&to=datetime&value=\(value)"] {
                    let answer = try await console.request(.get, path)
                    #expect(answer.status == 400, "\(path): \(answer.status)")
                    #expect(answer.text.contains("'\(value)' is not a time from 1970-01-01"), "\(path): \(answer.text.prefix(400))")
                }
            }
            let form = "csrf=\(console.csrf)&topic=prices.raw&to=datetime&value=-1"
            #expect(try await console.request(.post, "/stages/prices-decode/reset", form: form).status == 400)
        }
    }

    /// A filter value that is not UTF-8 (or not percent-encoding at all, or given twice) does
    /// not silently become "any": it is refused, naming the parameter.
    @Test func aFilterThatCannotBeReadIsRefusedNotDropped() async throws {
        try await Console.with { console in
            for query in ["stage=%FF", "reason=%C3%28", "origin=%", "field=%G1", "stage=a&stage=", "letter=garbage",
                          "letter=pipeline.dead-letters%2F-1%400", "letter=pipeline.dead-letters%2F2147483648%400",
                          "letter=pipeline.dead-letters%2F0%40100000000000000000000", "letter=%2F0%400"] {
                let name = String(query.prefix { $0 != "=" })
                let page = try await console.request(.get, "/dead-letters?\(query)")
                #expect(page.status == 400, "\(query): \(page.status)")
                #expect(page.body.contains(name), "\(query): names the parameter: \(page.body.prefix(400))")
                for path in ["/dead-letters/redrive/preview", "/dead-letters/redrive"] {
                    let post = try await console.request(.post, path, form: "csrf=\(console.csrf)&expected=0&\(query)")
                    #expect(post.status == 400, "\(path) \(query): \(post.status)")
                    #expect(post.body.contains(name), "\(path) \(query): \(post.body.prefix(400))")
                    #expect(!post.body.contains("Redrive preview"), "no preview of everything")
                }
            }
            // A space as `+` (how a browser sends a GET form) is a space.
            let plus = try await console.request(.get, "/dead-letters?field=trade+price")
            #expect(plus.status == 200 && plus.body.contains("0 of 0 dead letters match"), "\(plus.status) \(plus.body.prefix(600))")
        }
    }

    static let routes: [(HTTPRequest.Method, String)] = [
        (.get, "/"), (.get, "/stages/prices-decode"), (.get, "/dead-letters"), (.get, "/dead-letters/0/0"), (.get, "/api/stages"),
        (.get, "/redrives"), (.get, "/find"), (.get, "/workers"), (.get, "/stages/prices-decode/reset"), (.get, "/static/console.css"),
        (.get, "/static/console.js"), (.get, "/login"), (.get, "/healthz"), (.get, "/favicon.ico"), (.get, "/no-such-page"),
        (.post, "/stages/prices-decode/reset"), (.post, "/dead-letters/redrive/preview"), (.post, "/dead-letters/redrive"), (.post, "/login"),
        (.post, "/dead-letters/handled"),
        (.get, "/topics"), (.get, "/topics/prices.raw"), (.get, "/topics/prices.raw/0/0"), (.get, "/api/topics/prices.raw/tail?after=0:0"),
    ]

    /// DNS rebinding: a page of another name that resolves to 127.0.0.1 reaches the console
    /// with that name in Host. Only the console's own names pass, on every route.
    @Test func onlyTheConsolesOwnNamesPassInHost() async throws {
        try await Console.with(allowedHosts: ["console.example.org", "10.9.8.7"]) { console in
            let p = console.port
            for host in ["127.0.0.1:\(p)", "127.0.0.1", "localhost:\(p)", "LocalHost", "localhost.", "127.8.9.10:\(p)", "[::1]:\(p)", "[::1]",
                         "console.example.org", "Console.Example.ORG:443", "10.9.8.7:\(p)"] {
                let answer = try await console.request(.get, "/healthz", host: .name(host))
                #expect(answer.status == 200, "Host: \(host) → \(answer.status) \(answer.body)")
            }
            for host in ["evil.example", "evil.example:\(p)", "127.0.0.1.evil.example", "localhost.evil.example:\(p)", "console.example.org.evil.example",
                         "evilconsole.example.org", "10.0.0.1", "0.0.0.0:\(p)", "[::2]:\(p)", "127.0.0.1:\(p)@evil.example", "127.1", "0x7f.0.0.1", ""] {
                for (method, path) in Self.routes {
                    let answer = try await console.request(method, path, host: .name(host), form: method == .post ? "csrf=\(console.csrf)" : nil)
                    #expect([421, 400].contains(answer.status), "Host: \(host) \(method) \(path) → \(answer.status)")
                    #expect(answer.body.contains("--allowed-host"), "Host: \(host) \(method) \(path): says how to allow a name: \(answer.body.prefix(300))")
                }
            }
            let missing = try await console.request(.get, "/healthz", host: .none)
            #expect([421, 400].contains(missing.status), "no Host → \(missing.status)")
        }
    }

    /// A state-changing request from another site is refused even with a valid form token and
    /// the token: Origin must be the console's own (or, without Origin, Sec-Fetch-Site
    /// same-origin or none).
    @Test(arguments: [nil, "console-token-0123456789"])
    func crossSiteStateChangesAreRefused(token: String?) async throws {
        try await Console.with(token: token) { console in
            var auth: HTTPFields = [:]
            if let token { auth[.authorization] = "Bearer \(token)" }
            func post(_ path: String, _ headers: [(String, String)], form: String) async throws -> Console.Answer {
                var fields = auth
                for (name, value) in headers { fields[HTTPField.Name(name)!] = value }
                return try await console.request(.post, path, headers: fields, form: form)
            }
            let forms = [
                ("/dead-letters/redrive/preview", "csrf=\(console.csrf)"),
                ("/dead-letters/redrive", "csrf=\(console.csrf)&expected=0"),
                ("/dead-letters/handled", "csrf=\(console.csrf)&letter=pipeline.dead-letters%2F0%400"),
                ("/stages/prices-decode/reset", "csrf=\(console.csrf)&topic=prices.raw&to=earliest"),
                ("/login", "token=wrong"),
                ("/logout", ""),
            ]
            let crossSite: [[(String, String)]] = [
                [("Origin", "https://evil.example")], [("Origin", "null")], [("Origin", "http://evil.example:\(console.port)")],
                [("Origin", "http://localhost:\(console.port)")], [("Origin", "http://127.0.0.1:\(console.port).evil.example")],
                [("Origin", "http://127.0.0.1:\(console.port + 1)")], [("Origin", "https://evil.example"), ("Sec-Fetch-Site", "same-origin")],
                [("Sec-Fetch-Site", "cross-site")], [("Sec-Fetch-Site", "same-site")], [("Origin", "null"), ("Sec-Fetch-Site", "cross-site")],
                [("Origin", "null"), ("Sec-Fetch-Site", "none")],
            ]
            for (path, form) in forms {
                for headers in crossSite {
                    let answer = try await post(path, headers, form: form)
                    #expect(answer.status == 403, "\(path) \(headers) → \(answer.status)")
                    #expect(answer.body.contains("cross-site"), "\(path) \(headers): \(answer.body.prefix(300))")
                }
            }
            // The console's own pages post with their own Origin, or Sec-Fetch-Site same-origin;
            // a client that is not a browser sends neither.
            let sameSite: [[(String, String)]] = [
                [("Origin", "http://\(console.own)")], [("Sec-Fetch-Site", "same-origin")], [("Sec-Fetch-Site", "none")], [],
                [("Origin", "null"), ("Sec-Fetch-Site", "same-origin")],
            ]
            for headers in sameSite {
                let preview = try await post("/dead-letters/redrive/preview", headers, form: "csrf=\(console.csrf)")
                #expect(preview.status == 200 && preview.body.contains("Redrive preview"), "\(headers) → \(preview.status)")
                let login = try await post("/login", headers, form: "token=wrong")
                #expect(login.status == (token == nil ? 404 : 401), "\(headers) → \(login.status)")
            }
            // Same-origin posts carry the page's own Origin: the referrer policy is not no-referrer.
            #expect(try await console.request(.get, "/healthz").headers[HTTPField.Name("Referrer-Policy")!] == "same-origin")
            // Reads are not state changes: a GET from another site is answered (the CSP and
            // the browser's same-origin policy keep its answer from that site).
            #expect(try await console.request(.get, "/healthz", headers: [HTTPField.Name("Sec-Fetch-Site")!: "cross-site"]).status == 200)
        }
    }

    /// Named tokens: each request acts as its token's owner. A viewer sees the pages and can
    /// change nothing; an operator's redrive is recorded under the operator's name. A sign-in
    /// starts a session whose cookie holds nothing of the token and differs per sign-in; signing
    /// out ends it, so the same cookie is refused afterwards.
    /// Any topic is browsed without a group: the newest records newest first, filtered by
    /// partition, exact key (a `+` in the form is a space) and value text; a record's page shows
    /// its exact bytes; the live tail's API answers what arrived after the page's position and
    /// where to go on; an unknown topic is a 404 and is not created.
    @Test func anyTopicIsBrowsedWithFiltersTheWholeRecordAndALiveTail() async throws {
        try await Console.with { console in
            let producer = try KafkaProducer(configuration: ProducerConfiguration(kafka: console.service.kafka))
            let exact = #"{"trade_price":2874000.00000000,"trade_price":"oops","code":"KRW-BTC"}"#
            var records = (0..<5).map { ProducerRecord(topic: "prices.ticks", partition: 0, key: Array("k\($0)".utf8), value: Array("tick \($0)".utf8)) }
            records.append(ProducerRecord(topic: "prices.ticks", partition: 0, key: Array("with space".utf8), value: Array(exact.utf8),
                                          headers: [KafkaHeader(key: "trace", value: Array("t-9".utf8))]))
            for r in records { #expect(try await producer.send(r).error == nil) }

            let topics = try await console.request(.get, "/topics")
            #expect(topics.status == 200 && topics.body.contains("data-topic=\"prices.ticks\""), "\(topics.body.prefix(1500))")
            #expect(topics.body.contains("<a href=\"/stages/prices-decode\">prices-decode</a></td></tr>"), "written by the stage")
            let page = try await console.request(.get, "/topics/prices.ticks")
            #expect(page.status == 200 && page.body.contains("6 match"), "\(page.body.prefix(2000))")
            let offsets = page.body.components(separatedBy: "data-offset=\"").dropFirst().map { $0.prefix { $0 != "\"" } }
            #expect(offsets == ["0:5", "0:4", "0:3", "0:2", "0:1", "0:0"], "newest first: \(offsets)")
            #expect(try await console.request(.get, "/topics/prices.ticks?key=with+space").body.contains("1 match"), "the key with a space")
            #expect(try await console.request(.get, "/topics/prices.ticks?contains=tick+3").body.contains("data-offset=\"0:3\""))
            #expect(try await console.request(.get, "/topics/prices.ticks?contains=tick+3").body.contains("1 match"))
            #expect(try await console.request(.get, "/topics/prices.ticks?limit=2").body.contains("6 match; the newest 2 are shown"))
            #expect(try await console.request(.get, "/topics/prices.raw?partition=1").body.contains("0 match"), "partition 1 of prices.raw is empty")
            #expect(try await console.request(.get, "/topics/prices.ticks?tail=yes").status == 400)

            let whole = try await console.request(.get, "/topics/prices.ticks/0/5")
            #expect(whole.status == 200 && whole.body.contains(HTML.text(exact)), "the exact bytes, duplicate key and number as written")
            #expect(whole.body.contains("<td>trace</td><td>t-9</td>"))
            #expect(try await console.request(.get, "/topics/prices.ticks/0/99").status == 404)

            let tailing = try await console.request(.get, "/topics/prices.ticks?tail=on&contains=late")
            #expect(tailing.body.contains("data-live=\"tail\"") && tailing.body.contains("data-after=\"0:6\"") && tailing.body.contains("data-filter=\"contains=late\""))
            let none = try await console.request(.get, "/api/topics/prices.ticks/tail?after=0:6")
            #expect(none.status == 200 && none.body.contains("\"records\":[]") && none.body.contains("\"after\":\"0:6\""), "\(none.body)")
            for i in 0..<2 { #expect(try await producer.send(ProducerRecord(topic: "prices.ticks", partition: 0, value: Array("late \(i)".utf8))).error == nil) }
            let more = try await console.request(.get, "/api/topics/prices.ticks/tail?after=0:6")
            struct Tail: Decodable { struct R: Decodable { var offset: Int64; var value: String; var link: String }; var records: [R]; var after: String }
            let tail = try JSONDecoder().decode(Tail.self, from: Data(more.body.utf8))
            #expect(tail.records.map(\.offset) == [6, 7] && tail.records.map(\.value) == ["late 0", "late 1"] && tail.after == "0:8", "\(more.body)")
            #expect(tail.records.first?.link == "/topics/prices.ticks/0/6")
            let filtered = try JSONDecoder().decode(Tail.self, from: Data(try await console.request(.get, "/api/topics/prices.ticks/tail?after=0:6&contains=late+1").body.utf8))
            #expect(filtered.records.map(\.offset) == [7] && filtered.after == "0:8", "filtered, and the position past what was read")
            await producer.close()

            #expect(try await console.request(.get, "/topics/no.such.topic").status == 404)
            #expect(try await console.request(.get, "/api/topics/no.such.topic/tail?after=").status == 404)
            let admin = try KafkaAdmin(configuration: console.service.kafka)
            #expect(try await !admin.topicExists("no.such.topic"), "looking did not create it")
            await admin.close()
        }
    }

    /// A dead letter says itself where it goes back to, and anyone who may write to the
    /// dead-letter topic can write one: one naming a topic its stage neither reads nor writes
    /// (here the redrive log, to forge an entry) is left out of the redrive, with why, and
    /// nothing is written there; the genuine one beside it is sent.
    @Test func aDeadLetterNamingATopicOutsideItsStageIsNotRedriven() async throws {
        try await Console.with { console in
            let own: HTTPFields = [.origin: "http://\(console.own)"]
            try await console.writeDeadLetters([("prices.raw", "genuine"), ("pipeline.console.redrives", #"{"forged":true}"#)].map { topic, value in
                InputRecord(key: nil, value: Array(value.utf8), timestamp: 1_000, origin: RecordOrigin(topic: topic, partition: 0, offset: 7))
            }, failure: DecodeFailure(field: "$", reason: .malformedJSON, detail: "not JSON"))
            let preview = try await console.request(.post, "/dead-letters/redrive/preview", headers: own, form: "csrf=\(console.csrf)")
            #expect(preview.body.contains("<span id=\"redrive-count\">1</span>") && preview.body.contains("<span id=\"refused-count\">1</span>")
                    && preview.text.contains("pipeline.dead-letters/0@1: it names pipeline.console.redrives, which stage prices-decode neither reads nor writes"),
                    "\(preview.text.prefix(2500))")
            let done = try await console.request(.post, "/dead-letters/redrive", headers: own, form: "csrf=\(console.csrf)&expected=1")
            #expect(done.status == 200, "\(done.body.prefix(1000))")
            var raw: [String] = [], log: [String] = []
            try await TopicReader(kafka: console.service.kafka).readTopic("prices.raw") { batch in raw += batch.map { String(decoding: $0.value ?? [], as: UTF8.self) } }
            try await TopicReader(kafka: console.service.kafka).readTopic("pipeline.console.redrives") { batch in log += batch.map { String(decoding: $0.value ?? [], as: UTF8.self) } }
            #expect(raw.filter { $0 == "genuine" }.count == 1, "\(raw)")
            #expect(log.count == 1 && !log.contains { $0.contains("forged") }, "only the console's own record: \(log)")
        }
    }

    /// Three identical redrive posts at once (a double click, a retried form) send the records
    /// once: the console checks each post's previewed count against the dead letters and the
    /// redrive log one action at a time, so the first is sent and the others get 409.
    @Test func identicalRedrivesAtOnceSendTheRecordsOnce() async throws {
        try await Console.with { console in
            let own: HTTPFields = [.origin: "http://\(console.own)"]
            try await console.writeDeadLetters((0..<3).map { i in
                InputRecord(
                    key: Array("k\(i)".utf8), value: Array("again\(i)".utf8), timestamp: 1_000,
                    origin: RecordOrigin(topic: "prices.raw", partition: 1, offset: Int64(i)))
            })
            let preview = try await console.request(.post, "/dead-letters/redrive/preview", headers: own, form: "csrf=\(console.csrf)")
            #expect(preview.body.contains("<span id=\"redrive-count\">3</span>"), "\(preview.body.prefix(1500))")

            let statuses = try await withThrowingTaskGroup(of: Int.self) { posts in
                for _ in 0..<3 {
                    posts.addTask { try await console.request(.post, "/dead-letters/redrive", headers: own, form: "csrf=\(console.csrf)&expected=3").status }
                }
                return try await posts.reduce(into: []) { $0.append($1) }.sorted()
            }
            #expect(statuses == [200, 409, 409], "one redrive went through, the others saw it: \(statuses)")
            var values: [String] = []
            try await TopicReader(kafka: console.service.kafka).readTopic("prices.raw") { batch in
                values += batch.map { String(decoding: $0.value ?? [], as: UTF8.self) }
            }
            #expect(values.filter { $0.hasPrefix("again") }.sorted() == ["again0", "again1", "again2"], "each record sent once: \(values)")
            let log = try await console.request(.get, "/redrives", headers: own)
            #expect(log.body.components(separatedBy: "<td>redrive</td>").count == 2, "one redrive in the log")
        }
    }

    /// Dead letters are found by their original key, and one dead letter's page redrives that
    /// one only: the preview counts 1, the CLI line names its topic, partition and offset, exactly
    /// that record goes back to its origin, and the page then says who redrove it. Another is
    /// marked handled: recorded, nothing sent, left out of the next preview.
    @Test func oneDeadLetterIsRedrivenFromItsPageAndDeadLettersAreFoundByKey() async throws {
        try await Console.with { console in
            let own: HTTPFields = [.origin: "http://\(console.own)"]
            try await console.writeDeadLetters(["a", "b", "a"].enumerated().map { i, key in
                InputRecord(
                    key: Array(key.utf8), value: Array("bad\(i)".utf8), timestamp: 1_000 + Int64(i),
                    origin: RecordOrigin(topic: "prices.raw", partition: 0, offset: Int64(20 + i)))
            })

            let byKey = try await console.request(.get, "/dead-letters?key=a", headers: own)
            #expect(byKey.status == 200 && byKey.body.contains("2 of 3 dead letters match"), "\(byKey.body.prefix(2000))")
            // By the original records' time (1,000, 1,001, 1,002 ms): ISO-8601 or epoch ms; a
            // value that is neither is refused, not dropped.
            let byTime = try await console.request(.get, "/dead-letters?since=1001&until=1970-01-01T00:00:02Z", headers: own)
            #expect(byTime.status == 200 && byTime.body.contains("2 of 3 dead letters match") && byTime.body.contains("value=\"1001\""),
                    "\(byTime.body.prefix(2000))")
            let badTime = try await console.request(.get, "/dead-letters?since=yesterday", headers: own)
            #expect(badTime.status == 400 && badTime.text.contains("since"), "\(badTime.status)")
            let timePreview = try await console.request(.post, "/dead-letters/redrive/preview", headers: own, form: "csrf=\(console.csrf)&since=1002")
            #expect(timePreview.body.contains("<span id=\"redrive-count\">1</span>") && timePreview.body.contains("--since &#39;1002&#39;")
                || timePreview.body.contains("--since '1002'"), "\(timePreview.body.prefix(1500))")
            let page = try await console.request(.get, "/dead-letters/0/1", headers: own)
            #expect(page.body.contains("id=\"preview-redrive-one\"") && page.body.contains("value=\"pipeline.dead-letters/0@1\""), "\(page.body.suffix(1500))")
            let letter = "letter=pipeline.dead-letters%2F0%401"
            let preview = try await console.request(.post, "/dead-letters/redrive/preview", headers: own, form: "csrf=\(console.csrf)&\(letter)")
            #expect(preview.status == 200 && preview.body.contains("<span id=\"redrive-count\">1</span>"), "\(preview.body.prefix(2000))")
            #expect(preview.body.contains("--topic &#39;pipeline.dead-letters&#39; --partition &#39;0&#39; --offset &#39;1&#39;")
                || preview.body.contains("--topic 'pipeline.dead-letters' --partition '0' --offset '1'"), "the CLI line names the one dead letter")
            let done = try await console.request(.post, "/dead-letters/redrive", headers: own, form: "csrf=\(console.csrf)&\(letter)&expected=1")
            #expect(done.status == 200, "\(done.body.prefix(1000))")

            var values: [String] = []
            try await TopicReader(kafka: console.service.kafka).readTopic("prices.raw") { batch in
                values += batch.map { String(decoding: $0.value ?? [], as: UTF8.self) }
            }
            #expect(values.filter { $0.hasPrefix("bad") } == ["bad1"], "exactly that dead letter went back: \(values)")
            let after = try await console.request(.get, "/dead-letters/0/1", headers: own)
            #expect(after.body.contains("id=\"redriven\"") && !after.body.contains("preview-redrive-one"), "the page says it was redriven")

            // Marked handled: recorded with who, nothing sent, left out of the next preview.
            let handled = try await console.request(.post, "/dead-letters/handled", headers: own, form: "csrf=\(console.csrf)&letter=pipeline.dead-letters%2F0%402")
            #expect(handled.status == 200 && handled.body.contains("Marked handled by loopback"), "\(handled.status): \(handled.body.prefix(1000))")
            let rest = try await console.request(.post, "/dead-letters/redrive/preview", headers: own, form: "csrf=\(console.csrf)&key=a")
            #expect(rest.body.contains("<span id=\"redrive-count\">1</span>") && rest.body.contains("1 the console redrove or marked handled before"),
                    "of key a, letter 0 is left (letter 2 was marked handled): \(rest.body.prefix(1500))")
            let log = try await console.request(.get, "/redrives", headers: own)
            #expect(log.body.contains("<td>marked handled</td>") && log.body.contains("<td>redrive</td>"))
            var sentAfter: [String] = []
            try await TopicReader(kafka: console.service.kafka).readTopic("prices.raw") { batch in
                sentAfter += batch.map { String(decoding: $0.value ?? [], as: UTF8.self) }
            }
            #expect(sentAfter.filter { $0.hasPrefix("bad") } == ["bad1"], "marking handled sends nothing")
        }
    }

    @Test func namedTokensActAsTheirOwnersAndViewersCannotAct() async throws {
        let alice = "alice-token-0123456789", bob = "bob-token-01234567890"
        let access = try ConsoleAccess.parse(tokensFile: "alice: \(alice) operator\nbob: \(bob) viewer\n", source: "tokens")
        try await Console.with(access: access) { console in
            let own: HTTPFields = [.origin: "http://\(console.own)"]
            func bearer(_ token: String) -> HTTPFields {
                var fields = own
                fields[.authorization] = "Bearer \(token)"
                return fields
            }
            let page = try await console.request(.get, "/", headers: bearer(bob))
            #expect(page.status == 200 && page.body.contains("bob (viewer)"), "\(page.status)")
            for (path, form) in [
                ("/dead-letters/redrive/preview", "csrf=\(console.csrf)"),
                ("/dead-letters/redrive", "csrf=\(console.csrf)&expected=0"),
                ("/dead-letters/handled", "csrf=\(console.csrf)&letter=pipeline.dead-letters%2F0%400"),
                ("/stages/prices-decode/reset", "csrf=\(console.csrf)&topic=prices.raw&to=earliest"),
            ] {
                let refused = try await console.request(.post, path, headers: bearer(bob), form: form)
                #expect(refused.status == 403 && refused.text.contains("bob's token is a viewer's"), "\(path) → \(refused.status)")
            }
            #expect(try await console.request(.post, "/dead-letters/redrive/preview", headers: bearer(alice), form: "csrf=\(console.csrf)").status == 200)
            let done = try await console.request(.post, "/dead-letters/redrive", headers: bearer(alice), form: "csrf=\(console.csrf)&expected=0")
            #expect(done.status == 200, "\(done.status): \(done.body.prefix(300))")
            let log = try await console.request(.get, "/redrives", headers: bearer(bob))
            #expect(log.body.contains("<td>alice</td>"), "the redrive log names the token's owner")

            // Sessions.
            func signIn(_ token: String) async throws -> String {
                let answer = try await console.request(.post, "/login", headers: own, form: "token=\(token)")
                #expect(answer.status == 303)
                let cookie = try #require(answer.headers[.setCookie])
                #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && cookie.contains("Max-Age="))
                return String(try #require(cookie.split(separator: ";").first))
            }
            let first = try await signIn(alice), second = try await signIn(alice)
            #expect(first != second, "each sign-in gets a session of its own")
            #expect(!first.contains(alice) && !first.contains("alice"), "the cookie holds nothing of the token or the name: \(first)")
            var withCookie = own
            withCookie[.cookie] = first
            #expect(try await console.request(.get, "/", headers: withCookie).body.contains("alice (operator)"))
            let out = try await console.request(.post, "/logout", headers: withCookie)
            #expect(out.status == 303 && out.headers[.location] == "/login" && out.headers[.setCookie]?.contains("Max-Age=0") == true)
            let after = try await console.request(.get, "/", headers: withCookie)
            #expect(after.status == 303 && after.headers[.location] == "/login", "a signed-out session's cookie is refused")
            withCookie[.cookie] = second
            #expect(try await console.request(.get, "/", headers: withCookie).status == 200, "the other session goes on")
        }
    }

    /// A refused or bad request is answered at once and its connection closed then, whatever
    /// the client still sends or withholds; a connection that goes silent in the middle of a
    /// request is closed after the idle timeout (2 s here), not held for good.
    @Test func refusedAndSilentConnectionsAreClosed() async throws {
        try await Console.with(token: "console-token-0123456789", idleTimeout: .seconds(2)) { console in
            let port = console.port
            let refusals = [
                ("GET / HTTP/1.1\r\nHost: rebind.attacker.example\r\n\r\n", "421"),
                ("GET / HTTP/1.1\r\n\r\n", "421"),
                ("POST /dead-letters/redrive HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: https://evil.example\r\nContent-Length: 500\r\n\r\nab", "403"),
                ("GET /api/stages HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "401"),
                ("GET /dead-letters/0/abc HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer console-token-0123456789\r\n\r\n", "400"),
                ("GARBAGE\r\n\r\n", "400"),
            ]
            for (request, status) in refusals {
                let (answer, closed) = await RawHTTP.exchange(port: port, request)
                #expect(answer.hasPrefix("HTTP/1.1 \(status)"), "\(request.debugDescription): \(answer.prefix(80))")
                // At once: well before the 2 s idle timeout (1.5 s leaves room for a loaded machine).
                #expect(closed.map { $0 < .milliseconds(1500) } == true, "\(request.debugDescription) closed after \(closed.map { "\($0)" } ?? "more than 30 s")")
            }
            // HTTP/1.0 without keep-alive: closed once answered.
            let old = await RawHTTP.exchange(port: port, "GET /login HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            #expect(old.answer.hasPrefix("HTTP/1.1 200"), "\(old.answer.prefix(80))")
            #expect(old.closedAfter.map { $0 < .milliseconds(1500) } == true, "HTTP/1.0 closed after \(old.closedAfter.map { "\($0)" } ?? "more than 30 s")")
            // `Connection: close` in any case, among other tokens or in a second header: closed once
            // answered, and the answer says so (as NIO reads the header; Hummingbird alone closed
            // for the exact lowercase form only).
            for (version, connection) in [("1.1", "CLOSE"), ("1.1", "keep-alive, close"), ("1.1", "Upgrade, close"),
                                          ("1.1", "keep-alive\r\nConnection: close"), ("1.0", "keep-alive, close")] {
                let exchange = await RawHTTP.exchange(port: port, "GET /login HTTP/\(version)\r\nHost: 127.0.0.1\r\nConnection: \(connection)\r\n\r\n")
                #expect(exchange.answer.hasPrefix("HTTP/1.1 200") && exchange.answer.lowercased().contains("connection: close"),
                        "\(connection.debugDescription): \(exchange.answer.prefix(300))")
                #expect(exchange.closedAfter.map { $0 < .milliseconds(1500) } == true,
                        "\(connection.debugDescription): closed after \(exchange.closedAfter.map { "\($0)" } ?? "more than 30 s")")
            }
            // A body announced and never sent: closed by the idle timeout.
            let (_, silent) = await RawHTTP.exchange(port: port, "POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\nabc")
            #expect(silent.map { $0 >= .seconds(2) } == true, "a silent request body closed after \(silent.map { "\($0)" } ?? "more than 30 s")")
        }
    }
}
