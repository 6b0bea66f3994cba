import Foundation
import HTTPTypes
import HummingbirdTesting
import Kafka
import Logging
import NIOCore
import Operations
import Pipeline
import ServiceLifecycle
import Testing
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

    /// Runs `body` against a console started for it, then stops the console.
    static func with(
        token: String? = nil, allowedHosts: [String] = [], _ body: (ConsoleUnderTest) async throws -> Void
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
        settings.token = token
        settings.allowedHosts = allowedHosts
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
        ]
    }()

    /// Every place a request carries a number, fed every extreme: a number out of its range,
    /// or no number at all, is answered 400 naming what was wrong; one in range is never 400
    /// nor 5xx; nothing stops the console.
    @Test func everyNumberInARequestIsRangeChecked() async throws {
        try await Console.with { console in
            for place in Self.places {
                for value in Self.extremes where !(place.inPath && value.isEmpty) {
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
            for query in ["stage=%FF", "reason=%C3%28", "origin=%", "field=%G1", "stage=a&stage="] {
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
                ("/stages/prices-decode/reset", "csrf=\(console.csrf)&topic=prices.raw&to=earliest"),
                ("/login", "token=wrong"),
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
}
