import Foundation

/// A fixed set of dedicated threads for libvips work.
///
/// libvips calls are CPU-bound and block for tens of milliseconds; running them on Swift's
/// cooperative pool would starve every other task in the process. `run` hands the closure to
/// one of `threads` threads and suspends the caller on a continuation, so concurrency is
/// bounded by the thread count and excess jobs wait in a FIFO queue.
///
/// The threads live until ``shutdown()``; call it when the stage stops.
public final class RenderPool: @unchecked Sendable {
    // @unchecked Sendable: the only mutable state (`jobs`, `head`, `stopped`) is read and
    // written with `condition` locked; the threads are started once in `init`.
    private let condition = NSCondition()
    /// FIFO of pending jobs; slots before `head` are taken (set to nil at once, so a finished
    /// job's captures, such as a source image, are released immediately).
    private var jobs: [(@Sendable () -> Void)?] = []
    private var head = 0
    private var stopped = false

    /// Number of images rendered at the same time.
    public let threads: Int

    /// Starts `threads` render threads and sets libvips' threads per image
    /// (process-wide: libvips has one setting; the last pool created wins).
    public init(threads: Int, threadsPerImage: Int = 1) {
        self.threads = max(1, threads)
        VipsRuntime.setThreadsPerImage(threadsPerImage)
        for index in 0..<self.threads {
            let thread = Thread { [self] in self.workLoop() }
            thread.name = "thumbnails-render-\(index)"
            thread.start()
        }
    }

    /// Runs `body` on a render thread and returns its result.
    /// Throws `CancellationError` if the pool has been shut down.
    public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let accepted = enqueue {
                continuation.resume(with: Result { try body() })
            }
            if !accepted { continuation.resume(throwing: CancellationError()) }
        }
    }

    /// Lets queued jobs finish, then stops the threads. Later `run` calls throw.
    public func shutdown() {
        condition.lock()
        stopped = true
        condition.broadcast()
        condition.unlock()
    }

    private func enqueue(_ job: @escaping @Sendable () -> Void) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !stopped else { return false }
        jobs.append(job)
        condition.signal()
        return true
    }

    private func workLoop() {
        while true {
            condition.lock()
            while head == jobs.count, !stopped { condition.wait() }
            if head == jobs.count {  // stopped and drained
                condition.unlock()
                return
            }
            let job = jobs[head]
            jobs[head] = nil
            head += 1
            if head > 64, head * 2 > jobs.count {  // compact now and then, not per job
                jobs.removeFirst(head)
                head = 0
            }
            condition.unlock()
            job?()
        }
    }
}

extension ThumbnailRenderer {
    /// Renders on `pool`'s threads (see ``render(_:specs:)``), suspending the caller meanwhile.
    public func render(_ source: [UInt8], specs: [ThumbnailSpec], on pool: RenderPool) async throws(ThumbnailError) -> RenderResult {
        let renderer = self
        let result: Result<RenderResult, ThumbnailError>
        do {
            result = try await pool.run {
                Result { () throws(ThumbnailError) in try renderer.render(source, specs: specs) }
            }
        } catch {
            // Only CancellationError reaches here: the pool was shut down.
            throw .renderPoolShutDown
        }
        return try result.get()
    }
}
