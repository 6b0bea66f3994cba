import Deadlines
import Foundation
import Synchronization
import Kafka

/// A child process (posix_spawn) whose combined output is read by a dedicated thread, so the caller can
/// await a line (an event) instead of sleeping, and the pipe never fills up.
public enum ManagedProcess {
    /// The exit code in a wait status (``Handle/waitForExit()``), or minus the signal that ended
    /// the process (exit 3 is the status 768; SIGKILL gives -9).
    public static func exitCode(waitStatus: Int32) -> Int32 {
        waitStatus & 0x7f == 0 ? (waitStatus >> 8) & 0xff : -(waitStatus & 0x7f)
    }

    public final class Handle: Sendable {
        public let pid: pid_t
        private let state = Mutex(State())

        struct State {
            var tail: [String] = []
            var lineWaiters: [(needle: String, continuation: CheckedContinuation<Bool, Never>)] = []
            var outputClosed = false
            var exitStatus: Int32?
            var exitWaiters: [CheckedContinuation<Int32, Never>] = []
            /// Lines containing each watched text, over the whole run (the tail forgets).
            var watched: [String: Int] = [:]
        }

        fileprivate init(pid: pid_t, watch: [String]) {
            self.pid = pid
            state.withLock { s in for needle in watch { s.watched[needle] = 0 } }
        }

        fileprivate func received(_ line: String) {
            let ready: [CheckedContinuation<Bool, Never>] = state.withLock { s in
                s.tail.append(line)
                if s.tail.count > 10_000 { s.tail.removeFirst(s.tail.count - 5_000) }
                for needle in s.watched.keys where line.contains(needle) { s.watched[needle, default: 0] += 1 }
                let (matched, rest) = s.lineWaiters.partitioned { line.contains($0.needle) }
                s.lineWaiters = rest
                return matched.map(\.continuation)
            }
            for c in ready { c.resume(returning: true) }
        }

        fileprivate func outputEnded() {
            let waiters = state.withLock { s in
                s.outputClosed = true
                defer { s.lineWaiters = [] }
                return s.lineWaiters.map(\.continuation)
            }
            for c in waiters { c.resume(returning: false) }
        }

        fileprivate func exited(_ status: Int32) {
            let waiters = state.withLock { s in
                s.exitStatus = status
                defer { s.exitWaiters = [] }
                return s.exitWaiters
            }
            for c in waiters { c.resume(returning: status) }
        }

        /// The last lines the process printed (up to `lines`).
        public func recentOutput(lines: Int = 50) -> String { state.withLock { $0.tail.suffix(lines).joined(separator: "\n") } }

        /// How many lines of the whole run contained `needle`, one of the texts `launch` was told
        /// to watch (nil for another).
        public func lines(containing needle: String) -> Int? { state.withLock { $0.watched[needle] } }

        /// Everything it printed (the last 5,000 to 10,000 lines of a long run).
        public func output() -> String { state.withLock { $0.tail.joined(separator: "\n") } }

        /// Returns when the process prints a line containing `needle`; throws if it exits first
        /// or the timeout passes.
        public func waitForLine(containing needle: String, timeout: Duration) async throws {
            let found = await Deadline.race(timeout) {
                await withCheckedContinuation { continuation in
                    let immediate: Bool? = self.state.withLock { s in
                        if s.tail.contains(where: { $0.contains(needle) }) { return true }
                        if s.outputClosed { return false }
                        s.lineWaiters.append((needle, continuation))
                        return nil
                    }
                    if let immediate { continuation.resume(returning: immediate) }
                }
            }
            guard let found else {
                // The timer won: release the waiter so its task ends too.
                outputEndedForWaiters(needle)
                throw LocalBrokerError.timedOut("no line containing \"\(needle)\" within \(timeout)")
            }
            guard found else { throw LocalBrokerError.startFailed("the process exited before printing \"\(needle)\"") }
        }

        private func outputEndedForWaiters(_ needle: String) {
            let waiters = state.withLock { s in
                let (matched, rest) = s.lineWaiters.partitioned { $0.needle == needle }
                s.lineWaiters = rest
                return matched.map(\.continuation)
            }
            for c in waiters { c.resume(returning: false) }
        }

        /// Waits for the process to end; returns its wait status (``ManagedProcess/exitCode(waitStatus:)``
        /// reads it).
        @discardableResult
        public func waitForExit() async -> Int32 {
            await withCheckedContinuation { continuation in
                let status: Int32? = state.withLock { s in
                    if let status = s.exitStatus { return status }
                    s.exitWaiters.append(continuation)
                    return nil
                }
                if let status { continuation.resume(returning: status) }
            }
        }

        public var isRunning: Bool { state.withLock { $0.exitStatus == nil } }

        /// SIGTERM. (The pid cannot have been reused: it is reaped only by our waiter.)
        public func terminate() { if isRunning { Foundation.kill(pid, SIGTERM) } }
        public func kill() { if isRunning { Foundation.kill(pid, SIGKILL) } }
    }

    /// Starts `path` with `posix_spawn`. Foundation's `Process` passes on the spawning thread's
    /// signal mask, and Dispatch threads block SIGTERM and SIGINT: a child started that way
    /// ignores `terminate()`. Here the child gets an empty mask and default handlers.
    /// `watch`: texts whose lines are counted over the whole run (``Handle/lines(containing:)``),
    /// for a check that the tail, which keeps the last 5,000 to 10,000 lines, cannot make.
    public static func launch(_ path: String, arguments: [String], environment: [String: String], watch: [String] = []) throws -> Handle {
        var env = ProcessInfo.processInfo.environment
        for (k, v) in environment { env[k] = v }

        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw LocalBrokerError.startFailed("pipe() failed: errno \(errno)") }
        let (readEnd, writeEnd) = (fds[0], fds[1])

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, writeEnd, 1)
        posix_spawn_file_actions_adddup2(&actions, writeEnd, 2)
        posix_spawn_file_actions_addclose(&actions, readEnd)
        posix_spawn_file_actions_addclose(&actions, writeEnd)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for sig in [SIGTERM, SIGINT, SIGPIPE, SIGHUP] { sigaddset(&defaults, sig) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, path, &actions, &attributes, argv, envp)
        close(writeEnd)
        guard rc == 0 else {
            close(readEnd)
            throw LocalBrokerError.startFailed("could not start \(path): \(String(cString: strerror(rc)))")
        }

        let childPID = pid
        let handle = Handle(pid: childPID, watch: watch)
        let reader = Thread {
            defer { close(readEnd) }
            var buffer: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = chunk.withUnsafeMutableBytes { read(readEnd, $0.baseAddress, $0.count) }  // blocks this thread only
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                for byte in chunk[0..<n] {
                    if byte == UInt8(ascii: "\n") {
                        handle.received(String(decoding: buffer, as: UTF8.self))
                        buffer.removeAll(keepingCapacity: true)
                    } else {
                        buffer.append(byte)
                    }
                }
            }
            if !buffer.isEmpty { handle.received(String(decoding: buffer, as: UTF8.self)) }
            handle.outputEnded()
        }
        reader.name = "process-output"
        reader.start()
        let waiter = Thread {
            var status: Int32 = 0
            while waitpid(childPID, &status, 0) < 0 && errno == EINTR {}
            handle.exited(status)
        }
        waiter.name = "process-wait"
        waiter.start()
        return handle
    }
}

extension Array {
    fileprivate func partitioned(_ matches: (Element) -> Bool) -> ([Element], [Element]) {
        var yes: [Element] = []
        var no: [Element] = []
        for e in self { if matches(e) { yes.append(e) } else { no.append(e) } }
        return (yes, no)
    }
}

/// Loopback port helpers.
public enum FreePort {
    /// A port the kernel just handed out for 127.0.0.1 (bind to port 0, read it, close).
    public static func find() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw LocalBrokerError.startFailed("socket() failed: errno \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { p -> Int32 in
                guard bind(fd, p, length) == 0 else { return -1 }
                return getsockname(fd, p, &length)
            }
        }
        guard bound == 0 else { throw LocalBrokerError.startFailed("bind to 127.0.0.1:0 failed: errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// Connects until the port accepts; each try is one blocking connect on a Dispatch thread.
    public static func waitUntilAccepting(port: Int, timeout: Duration) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        var delay = Duration.milliseconds(5)
        while clock.now < deadline {
            if await BlockingExecutor.run({ canConnect(port: port) }) { return }
            // Connection refused is not an event we can wait on; back off briefly and retry.
            try await Task.sleep(for: delay)
            delay = min(delay * 2, .milliseconds(200))
        }
        throw LocalBrokerError.timedOut("127.0.0.1:\(port) did not accept connections within \(timeout)")
    }

    static func canConnect(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }
}
