import Foundation
import HTTPTesting
import PipelineTesting
import Synchronization
import Testing
import Thumbnails
import SafeFetch

/// A resolver with fixed answers that records what it was asked.
final class StubResolver: HostResolver {
    let answers: [String: [String]]
    let asked = Mutex<[String]>([])

    init(_ answers: [String: [String]]) { self.answers = answers }

    func resolve(host: String) async throws -> [IPAddress] {
        asked.withLock { $0.append(host) }
        guard let list = answers[host] else { throw SystemResolver.ResolutionError(description: "NXDOMAIN \(host)") }
        return list.compactMap(IPAddress.init)
    }
}

/// Loopback is allowed explicitly (it is refused by default); retries are fast. Timeouts are
/// long enough that a test server on a loaded 2-core machine does not trip them: tests that
/// count requests would otherwise see a timed-out attempt retried (the timeout test sets its own).
func testFetchConfiguration(maxBytes: Int = 1_000_000, allowLoopback: Bool = true, maxAttempts: Int = 3) -> FetchConfiguration {
    FetchConfiguration(
        connectTimeout: .seconds(10),
        readTimeout: .seconds(10),
        attemptTimeout: .seconds(25),
        maxBytes: maxBytes,
        maxAttempts: maxAttempts,
        initialBackoff: .milliseconds(10),
        maxBackoff: .milliseconds(20),
        destinations: DestinationPolicy(allowList: allowLoopback ? [IPNetwork("127.0.0.1")!] : [])
    )
}

func expectFetchError(_ expected: (FetchError) -> Bool, _ body: () async throws -> FetchedResponse) async {
    do {
        let image = try await body()
        Issue.record("expected an error, fetched \(image.bytes.count) bytes from \(image.finalURL)")
    } catch let error as FetchError {
        #expect(expected(error), "unexpected error: \(error)")
    } catch {
        Issue.record("expected a FetchError, got \(error)")
    }
}

@Suite("Fetch over HTTP")
struct HTTPFetchTests {
    let image = Fixtures.png(width: 32, height: 16)

    @Test("200 returns the body")
    func ok() async throws {
        let server = try await TestHTTPServer(routes: ["/img": [.ok(image, contentType: "image/png")]])
        let fetched = try await SafeFetcher(configuration: testFetchConfiguration()).fetch(server.baseURL + "/img")
        #expect(fetched.bytes == image)
        #expect(fetched.contentType == "image/png")
        #expect(fetched.attempts == 1)
        try await server.close()
    }

    @Test("404 fails at once, without a retry")
    func notFoundNoRetry() async throws {
        let server = try await TestHTTPServer(routes: [:])
        let fetcher = SafeFetcher(configuration: testFetchConfiguration())
        await expectFetchError({ $0 == .httpStatus(url: server.baseURL + "/missing", status: 404) }) {
            try await fetcher.fetch(server.baseURL + "/missing")
        }
        #expect(server.requests(to: "/missing") == 1)
        try await server.close()
    }

    @Test("503 then 200 succeeds after one retry")
    func retryAfter503() async throws {
        let server = try await TestHTTPServer(routes: ["/flaky": [.status(.serviceUnavailable), .ok(image, contentType: "image/png")]])
        let fetched = try await SafeFetcher(configuration: testFetchConfiguration()).fetch(server.baseURL + "/flaky")
        #expect(fetched.bytes == image)
        #expect(fetched.attempts == 2)
        #expect(server.requests(to: "/flaky") == 2)
        try await server.close()
    }

    @Test("a 5xx that persists stops after maxAttempts")
    func retriesAreBounded() async throws {
        let server = try await TestHTTPServer(routes: ["/down": [.status(.badGateway)]])
        let fetcher = SafeFetcher(configuration: testFetchConfiguration())
        await expectFetchError({ $0 == .httpStatus(url: server.baseURL + "/down", status: 502) }) {
            try await fetcher.fetch(server.baseURL + "/down")
        }
        #expect(server.requests(to: "/down") == 3)
        try await server.close()
    }

    @Test("a read timeout is retried, then reported as timedOut")
    func readTimeout() async throws {
        let server = try await TestHTTPServer(routes: ["/hang": [.hang]])
        var configuration = testFetchConfiguration()
        configuration.readTimeout = .milliseconds(100)
        configuration.maxAttempts = 2
        let fetcher = SafeFetcher(configuration: configuration)
        await expectFetchError({ $0 == .timedOut(url: server.baseURL + "/hang") }) {
            try await fetcher.fetch(server.baseURL + "/hang")
        }
        // The server records a request once its handler runs, which a loaded machine may do after
        // the client's 100 ms gave out (a CI run saw 1): wait for the second before counting.
        try? await eventually("the server saw the retry", within: .seconds(10)) { server.requests(to: "/hang") >= 2 }
        #expect(server.requests(to: "/hang") == 2)
        try await server.close()
    }

    @Test("a body trickled a byte at a time is bounded by the attempt's time limit, not only its head")
    func trickledBodyTimesOut() async throws {
        // 80 bytes, one per 250 ms: 20 s in all, never silent for the 5 s read timeout.
        let server = try await TestHTTPServer(routes: ["/slow": [.trickle(Array(repeating: 0x61, count: 80), every: .milliseconds(250))]])
        var configuration = testFetchConfiguration(maxAttempts: 1)
        configuration.readTimeout = .seconds(5)
        configuration.attemptTimeout = .seconds(1)
        let fetcher = SafeFetcher(configuration: configuration)
        let clock = ContinuousClock()
        let start = clock.now
        await expectFetchError({ $0 == .timedOut(url: server.baseURL + "/slow") }) {
            try await fetcher.fetch(server.baseURL + "/slow")
        }
        let took = clock.now - start
        // Well before the body's 20 s (loose: a loaded machine delays the timer).
        #expect(took < .seconds(12), "the 1 s attempt ended after \(took)")
        try await server.close()
    }

    @Test("a redirect to a private address is refused before connecting", arguments: [
        "http://10.0.0.1/internal.png",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:1/x.png",
        "http://[::ffff:10.0.0.1]/x.png",
        "http://127.0.0.2/x.png",  // loopback, but not the allow-listed address
    ])
    func redirectToPrivate(location: String) async throws {
        let server = try await TestHTTPServer(routes: ["/go": [.redirect(to: location)]])
        let fetcher = SafeFetcher(configuration: testFetchConfiguration())
        await expectFetchError({ if case .destinationNotAllowed = $0 { true } else { false } }) {
            try await fetcher.fetch(server.baseURL + "/go")
        }
        #expect(server.requests(to: "/go") == 1)  // refusal is final: no retry
        try await server.close()
    }

    @Test("a redirect to a name that resolves to a private address is refused")
    func redirectToPrivateName() async throws {
        let server = try await TestHTTPServer(routes: ["/go": [.redirect(to: "http://metadata.internal.test/computeMetadata")]])
        let resolver = StubResolver(["metadata.internal.test": ["93.184.216.34", "169.254.169.254"]])
        let fetcher = SafeFetcher(configuration: testFetchConfiguration(), resolver: resolver)
        await expectFetchError({ $0 == .destinationNotAllowed(url: "http://metadata.internal.test/computeMetadata", address: "169.254.169.254") }) {
            try await fetcher.fetch(server.baseURL + "/go")
        }
        #expect(resolver.asked.withLock { $0 } == ["metadata.internal.test"])
        try await server.close()
    }

    @Test("a host name is resolved once, checked, and the connection pinned to that address")
    func pinnedResolution() async throws {
        let server = try await TestHTTPServer(routes: ["/img": [.ok(image, contentType: "image/png")]])
        // "images.invalid" cannot resolve through real DNS (.invalid is reserved), so a
        // successful fetch shows AsyncHTTPClient connected to the address the guard checked.
        let resolver = StubResolver(["images.invalid": ["127.0.0.1"]])
        let fetcher = SafeFetcher(configuration: testFetchConfiguration(), resolver: resolver)
        let fetched = try await fetcher.fetch("http://images.invalid:\(server.port)/img")
        #expect(fetched.bytes == image)
        #expect(resolver.asked.withLock { $0 } == ["images.invalid"])
        try await server.close()
    }

    @Test("a redirect to file:// is refused")
    func redirectToFile() async throws {
        let server = try await TestHTTPServer(routes: ["/go": [.redirect(to: "file:///etc/passwd")]])
        let fetcher = SafeFetcher(configuration: testFetchConfiguration())
        await expectFetchError({ $0 == .unsupportedScheme(url: "file:///etc/passwd") }) {
            try await fetcher.fetch(server.baseURL + "/go")
        }
        try await server.close()
    }

    @Test("a relative redirect on an allowed host is followed")
    func redirectFollowed() async throws {
        let server = try await TestHTTPServer(routes: ["/old": [.redirect(to: "/new")], "/new": [.ok(image, contentType: "image/png")]])
        let fetched = try await SafeFetcher(configuration: testFetchConfiguration()).fetch(server.baseURL + "/old")
        #expect(fetched.bytes == image)
        #expect(fetched.finalURL == server.baseURL + "/new")
        #expect(server.requests(to: "/old") == 1 && server.requests(to: "/new") == 1)
        try await server.close()
    }

    @Test("redirect loops stop at maxRedirects")
    func redirectLoop() async throws {
        let server = try await TestHTTPServer(routes: ["/loop": [.redirect(to: "/loop")]])
        // One attempt: with 2 s timeouts a loaded machine once timed a hop out and the retry
        // started the chain again (9 requests); retrying is not what this test checks.
        let fetcher = SafeFetcher(configuration: testFetchConfiguration(maxAttempts: 1))
        await expectFetchError({ if case .tooManyRedirects(_, 5) = $0 { true } else { false } }) {
            try await fetcher.fetch(server.baseURL + "/loop")
        }
        #expect(server.requests(to: "/loop") == 6)
        try await server.close()
    }

    @Test("loopback is refused unless allow-listed, and nothing is sent")
    func loopbackRefusedByDefault() async throws {
        let server = try await TestHTTPServer(routes: ["/img": [.ok(image, contentType: "image/png")]])
        let fetcher = SafeFetcher(configuration: testFetchConfiguration(allowLoopback: false))
        await expectFetchError({ $0 == .destinationNotAllowed(url: server.baseURL + "/img", address: "127.0.0.1") }) {
            try await fetcher.fetch(server.baseURL + "/img")
        }
        #expect(server.requests(to: "/img") == 0)
        try await server.close()
    }

    @Test("bodies over the cap are refused, with or without Content-Length")
    func sizeCap() async throws {
        let big = [UInt8](repeating: 1, count: 200_000)
        let server = try await TestHTTPServer(routes: [
            "/declared": [.ok(big, contentType: "image/png")],
            "/chunked": [.chunked(big)],
        ])
        let fetcher = SafeFetcher(configuration: testFetchConfiguration(maxBytes: 100_000))
        for path in ["/declared", "/chunked"] {
            await expectFetchError({ $0 == .tooLarge(url: server.baseURL + path, limit: 100_000) }) {
                try await fetcher.fetch(server.baseURL + path)
            }
        }
        #expect(server.requests(to: "/chunked") == 1)  // not retried
        try await server.close()
    }

    @Test("unsupported schemes and malformed URLs are refused")
    func badURLs() async {
        let fetcher = SafeFetcher(configuration: testFetchConfiguration())
        await expectFetchError({ $0 == .unsupportedScheme(url: "ftp://example.com/a.png") }) {
            try await fetcher.fetch("ftp://example.com/a.png")
        }
        await expectFetchError({ $0 == .invalidURL("not a url") }) { try await fetcher.fetch("not a url") }
    }
}

@Suite("Destination policy")
struct DestinationPolicyTests {
    @Test("private, loopback, link-local, metadata and reserved addresses are refused", arguments: [
        "127.0.0.1", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254",
        "100.64.0.1", "0.0.0.0", "224.0.0.1", "255.255.255.255", "::1", "::", "fe80::1",
        "fd00:ec2::254", "fc00::1", "ff02::1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "64:ff9b::a00:1",
    ])
    func refused(address: String) throws {
        let ip = try #require(IPAddress(address))
        #expect(!DestinationPolicy().allows(ip))
    }

    @Test("public addresses are allowed", arguments: ["93.184.216.34", "8.8.8.8", "172.32.0.1", "2606:4700::1111", "::ffff:8.8.8.8"])
    func allowed(address: String) throws {
        let ip = try #require(IPAddress(address))
        #expect(DestinationPolicy().allows(ip))
    }

    @Test("the allow-list admits exactly what it names")
    func allowList() throws {
        let policy = DestinationPolicy(allowList: [IPNetwork("127.0.0.1")!, IPNetwork("10.20.0.0/16")!])
        #expect(policy.allows(IPAddress("127.0.0.1")!))
        #expect(!policy.allows(IPAddress("127.0.0.2")!))
        #expect(policy.allows(IPAddress("10.20.3.4")!))
        #expect(!policy.allows(IPAddress("10.21.0.1")!))
        #expect(!policy.allows(IPAddress("169.254.169.254")!))
        #expect(IPNetwork("10.0.0.0/33") == nil)
        #expect(IPNetwork("nonsense") == nil)
    }
}

@Suite("Fetch from file://")
struct FileFetchTests {
    @Test("files under a configured root are read; others, and symlinks out, are refused")
    func roots() async throws {
        let root = try TempDirectory()
        let outside = try TempDirectory()
        let bytes = Fixtures.png(width: 8, height: 8)
        try Data(bytes).write(to: URL(fileURLWithPath: root.path + "/a.png"))
        try Data(bytes).write(to: URL(fileURLWithPath: outside.path + "/secret.png"))
        try FileManager.default.createSymbolicLink(atPath: root.path + "/link.png", withDestinationPath: outside.path + "/secret.png")

        var configuration = testFetchConfiguration()
        configuration.fileRoots = [root.path]
        let fetcher = SafeFetcher(configuration: configuration)
        let fetched = try await fetcher.fetch("file://" + root.path + "/a.png")
        #expect(fetched.bytes == bytes)

        await expectFetchError({ if case .fileNotAllowed = $0 { true } else { false } }) {
            try await fetcher.fetch("file://" + outside.path + "/secret.png")
        }
        await expectFetchError({ if case .fileNotAllowed = $0 { true } else { false } }) {
            try await fetcher.fetch("file://" + root.path + "/link.png")
        }
        await expectFetchError({ if case .fileNotAllowed = $0 { true } else { false } }) {
            try await fetcher.fetch("file://" + root.path + "/../" + URL(fileURLWithPath: outside.path).lastPathComponent + "/secret.png")
        }
        // No roots configured: file:// is off.
        await expectFetchError({ if case .fileNotAllowed = $0 { true } else { false } }) {
            try await SafeFetcher(configuration: testFetchConfiguration()).fetch("file://" + root.path + "/a.png")
        }
        var small = configuration
        small.maxBytes = 10
        await expectFetchError({ if case .tooLarge = $0 { true } else { false } }) {
            try await SafeFetcher(configuration: small).fetch("file://" + root.path + "/a.png")
        }
    }
}

/// A fresh directory under the system temporary directory, removed when released.
final class TempDirectory {
    let path: String

    init() throws {
        var template = Array((NSTemporaryDirectory() + "/thumbs-test-XXXXXX").utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw CocoaError(.fileWriteUnknown)
        }
        path = String(cString: made)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}
