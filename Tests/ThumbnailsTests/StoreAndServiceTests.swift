import Foundation
import HTTPTesting
import Synchronization
import Testing
@testable import Thumbnails
import SafeFetch

@Suite("Local directory blob store")
struct LocalStoreTests {
    @Test("blobs land at content-addressed paths, atomically, once")
    func put() async throws {
        let dir = try TempDirectory()
        let store = LocalDirectoryBlobStore(root: dir.path)
        let bytes: [UInt8] = Array("thumbnail bytes".utf8)
        let hash = ContentHash.sha256Hex(bytes)
        let location = try await store.put(bytes, contentHash: hash, format: .jpeg)
        let expectedKey = "\(hash.prefix(2))/\(hash.dropFirst(2).prefix(2))/\(hash).jpg"
        #expect(location.key == expectedKey)
        #expect(location.uri == "file://\(dir.path)/\(expectedKey)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: dir.path + "/" + expectedKey)) == Data(bytes))

        // Same bytes again: same place, still one file, no temporary files left behind.
        let again = try await store.put(bytes, contentHash: hash, format: .jpeg)
        #expect(again == location)
        let files = try FileManager.default.subpathsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".jpg") || $0.contains(".tmp-") }
        #expect(files == [expectedKey])
    }

    @Test("the SHA-256 helper matches a known vector")
    func sha256() {
        #expect(ContentHash.sha256Hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test("a content hash that is not 64 hex characters is refused (it becomes a path)")
    func invalidHash() async throws {
        let dir = try TempDirectory()
        let store = LocalDirectoryBlobStore(root: dir.path)
        for bad in ["../../../../etc/passwd", "ABCDEF", String(repeating: "g", count: 64), ""] {
            await #expect(throws: BlobStoreError.invalidContentHash(bad)) {
                try await store.put([1, 2, 3], contentHash: bad, format: .jpeg)
            }
        }
    }

    @Test("a write that hangs (a stalled file system) fails within the store's time limit")
    func hungWriteTimesOut() async throws {
        let dir = try TempDirectory()
        var store = LocalDirectoryBlobStore(root: dir.path, timeout: .milliseconds(300))
        let release = DispatchSemaphore(value: 0)
        // Blocks its thread well past the limit (released by the test, or after 3 s at most: a
        // Dispatch thread held longer starves the other suites running in parallel).
        store.blockingWrite = { _, _, _, _ in _ = release.wait(timeout: .now() + 3) }
        defer { release.signal() }
        let hash = ContentHash.sha256Hex([1])
        let clock = ContinuousClock()
        let start = clock.now
        await #expect(throws: BlobStoreError.timedOut(path: dir.path + "/" + LocalDirectoryBlobStore.key(contentHash: hash, format: .jpeg), after: .milliseconds(300))) {
            try await store.put([1], contentHash: hash, format: .jpeg)
        }
        // Without the limit the put never returns (the write is blocked until the test ends);
        // the bound is loose because a loaded machine delays the timer (5.6 s seen in a full run).
        #expect(clock.now - start < .seconds(30), "the put returned after \(clock.now - start)")
    }

    @Test("an unwritable root is reported with the path")
    func unwritable() async throws {
        let store = LocalDirectoryBlobStore(root: "/proc/thumbs-cannot-exist")
        let hash = ContentHash.sha256Hex([1])
        await #expect(throws: BlobStoreError.self) { try await store.put([1], contentHash: hash, format: .webp) }
    }
}

/// Jobs running right now and the most seen at once.
final class ActiveJobs: Sendable {
    let state = Mutex((now: 0, most: 0))
}

@Suite("Thumbnail service: fetch, render, store")
struct ServiceTests {
    let specs = [
        ThumbnailSpec(name: "list", width: 50, height: 50, mode: .cover, format: .jpeg, quality: 80),
        ThumbnailSpec(name: "grid", width: 120, height: 120, mode: .fit, format: .webp, quality: 75),
    ]

    @Test("an HTTP source becomes stored thumbnails and an event naming them")
    func endToEnd() async throws {
        let source = Fixtures.jpeg(width: 300, height: 200)
        let server = try await TestHTTPServer(routes: ["/p/1.jpg": [.ok(source, contentType: "image/jpeg")]])
        let dir = try TempDirectory()
        let pool = RenderPool(threads: 2)
        defer { pool.shutdown() }
        let service = try ThumbnailService(
            specs: specs,
            pool: pool,
            fetcher: SafeFetcher(configuration: testFetchConfiguration()),
            store: LocalDirectoryBlobStore(root: dir.path)
        )
        let url = server.baseURL + "/p/1.jpg"
        let event = try await service.process(sourceURL: url)
        #expect(event.source == url)
        #expect(event.sourceHash == ContentHash.sha256Hex(source))
        #expect(event.sourceFormat == .jpeg && event.sourceWidth == 300 && event.sourceHeight == 200)
        #expect(event.thumbnails.map(\.name) == ["list", "grid"])
        #expect(event.thumbnails.map { [$0.width, $0.height] } == [[50, 50], [120, 80]])
        for thumb in event.thumbnails {
            let path = String(thumb.location.uri.dropFirst("file://".count))
            let stored = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
            #expect(stored.count == thumb.byteCount)
            #expect(ContentHash.sha256Hex(stored) == thumb.contentHash)
            #expect(thumb.location.key.hasSuffix(thumb.format == .jpeg ? ".jpg" : ".webp"))
        }
        // Re-running gives the same keys and locations.
        let again = try await service.process(sourceURL: url)
        #expect(again == event)
        // The event is plain JSON for the output topic.
        let json = try JSONEncoder().encode(event)
        #expect(try JSONDecoder().decode(ThumbnailEvent.self, from: json) == event)
        try await server.close()
    }

    @Test("errors say which step failed")
    func errorsByStep() async throws {
        let server = try await TestHTTPServer(routes: ["/bad.jpg": [.ok([0xFF, 0xD8, 0xFF, 0x00, 0x01], contentType: "image/jpeg")]])
        let dir = try TempDirectory()
        let pool = RenderPool(threads: 1)
        defer { pool.shutdown() }
        let service = try ThumbnailService(
            specs: specs, pool: pool,
            fetcher: SafeFetcher(configuration: testFetchConfiguration()),
            store: LocalDirectoryBlobStore(root: dir.path)
        )
        await #expect(throws: ThumbnailServiceError.fetch(.httpStatus(url: server.baseURL + "/nope", status: 404))) {
            try await service.process(sourceURL: server.baseURL + "/nope")
        }
        do {
            _ = try await service.process(sourceURL: server.baseURL + "/bad.jpg")
            Issue.record("a corrupt source produced thumbnails")
        } catch {
            if case .render(.corrupt) = error {} else { Issue.record("unexpected \(error)") }
            #expect(!error.isRetriable)
        }
        #expect(throws: ThumbnailError.invalidSpec("size name \"list\" appears twice")) {
            try ThumbnailService(specs: [specs[0], specs[0]], pool: pool, store: LocalDirectoryBlobStore(root: dir.path))
        }
        try await server.close()
    }

    @Test("a 2-thread pool never runs more than 2 jobs at once, and runs them all")
    func poolBoundsConcurrency() async throws {
        let pool = RenderPool(threads: 2)
        defer { pool.shutdown() }
        let renderer = ThumbnailRenderer()
        let source = Fixtures.jpeg(width: 300, height: 200)
        let spec = specs[0]
        let active = ActiveJobs()
        let keys = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<16 {
                group.addTask {
                    try await pool.run {
                        active.state.withLock { $0.now += 1; $0.most = max($0.most, $0.now) }
                        defer { active.state.withLock { $0.now -= 1 } }
                        return try renderer.render(source, spec: spec).metadata.key
                    }
                }
            }
            return try await group.reduce(into: [String]()) { $0.append($1) }
        }
        #expect(keys.count == 16 && Set(keys).count == 1)
        #expect(active.state.withLock { $0.most } <= 2)
    }

    @Test("a shut-down pool refuses work instead of hanging")
    func shutDownPool() async {
        let pool = RenderPool(threads: 1)
        pool.shutdown()
        await #expect(throws: ThumbnailError.renderPoolShutDown) {
            try await ThumbnailRenderer().render(Fixtures.png(width: 4, height: 4), specs: specs, on: pool)
        }
    }
}

@Suite("Render pool")
struct RenderPoolTests {
    final class Payload: Sendable {}

    @Test("a finished job's captures are released (no source image kept in the queue)")
    func releasesCaptures() async throws {
        let pool = RenderPool(threads: 1)
        defer { pool.shutdown() }
        weak var weakPayload: Payload?
        do {
            let payload = Payload()
            weakPayload = payload
            try await pool.run { _ = payload }
        }
        #expect(weakPayload == nil)
    }
}
