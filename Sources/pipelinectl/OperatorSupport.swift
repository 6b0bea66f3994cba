import ArgumentParser
import Foundation
import Pipeline
import Kafka
import Operations
import Logging
import Metrics
import Prometheus

/// Exit codes shared by the operator commands (also in `pipelinectl --help`).
enum Exit {
    /// The command did what was asked; every group OK.
    static let ok: Int32 = 0
    /// A Kafka or I/O error stopped the command.
    static let failure: Int32 = 1
    /// `lag`: some group is WARN (none ERR).
    static let warn: Int32 = 2
    /// `lag`: some group is STALL, STOP, REWIND or ERR (its worst partition). `topics apply`: drift.
    static let notOK: Int32 = 3
    /// Done, but not all of it: `produce` rejected lines, `ingest` rejected messages, `dlq redrive` left exhausted dead
    /// letters, `groups reset-offsets` refused a group that has members.
    static let partial: Int32 = 4
    /// ArgumentParser's code for a bad flag or value.
    static let usage: Int32 = 64
}

let exitCodesHelp = """
    Exit codes (operator commands):
      0   done; for lag, every group OK
      1   a Kafka or I/O error (the message says which)
      2   lag: a group is WARN
      3   lag: a group is STALL, STOP, REWIND or ERR; topics apply: drift
      4   done in part: produce rejected lines, ingest rejected messages, dlq redrive left
          dead letters that were redriven too often, groups reset-offsets refused a group
          with members
      64  a bad flag or value (the message names it and the fix)

    The bootstrap server comes from --bootstrap-server or KAFKA_BOOTSTRAP_SERVERS.
    """

/// Where the output goes and how it looks: colour and progress only on a terminal.
struct Terminal {
    static let stdoutIsTTY = isatty(STDOUT_FILENO) == 1
    static let stderrIsTTY = isatty(STDERR_FILENO) == 1
    /// Colour on a terminal unless NO_COLOR is set (no-color.org).
    static let colour = stdoutIsTTY && ProcessInfo.processInfo.environment["NO_COLOR"] == nil

    static func paint(_ text: String, _ code: String) -> String { colour ? "\u{1B}[\(code)m\(text)\u{1B}[0m" : text }

    static func status(_ s: String) -> String {
        switch s {
        case "OK": paint(s, "32")
        case "WARN": paint(s, "33")
        default: paint(s, "31")
        }
    }

    static func error(_ line: String) {
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

func formatSeconds(_ s: Double) -> String {
    guard s.isFinite else { return "-" }
    if s < 60 { return String(format: "%.0fs", s) }
    if s < 3600 { return String(format: "%.0fm%02.0fs", (s / 60).rounded(.down), s.truncatingRemainder(dividingBy: 60)) }
    return String(format: "%.0fh%02.0fm", (s / 3600).rounded(.down), (s.truncatingRemainder(dividingBy: 3600) / 60).rounded(.down))
}

func nowMillis() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

/// Parses a `--since`/`--until` style value, naming the flag when it is wrong.
func parseTime(_ text: String?, flag: String, now: Int64 = nowMillis()) throws -> Int64? {
    guard let text else { return nil }
    do { return try TimeSpec.parse(text, now: now) } catch { throw ValidationError("\(flag): \(error.description)") }
}

/// A number flag out of its range (``NumberBounds``), as a validation error naming the flag:
/// "--shift-by: '9223372036854775807' is not a shift from … to …".
func checkRange(_ value: Int64?, _ range: ClosedRange<Int64>, flag: String, what: String) throws {
    guard let value else { return }
    do { _ = try NumberBounds.check(value, range, what: what) } catch { throw ValidationError("\(flag): \(error.description)") }
}

/// Prints one value as pretty JSON (stable key order).
func printJSON<T: Encodable>(_ value: T) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    print(String(decoding: try encoder.encode(value), as: UTF8.self))
}

/// The partitions of a topic, or a validation error naming the topic when it does not exist.
func topicPartitions(of topic: String, admin: KafkaAdmin, flag: String) async throws -> [TopicPartition] {
    do { return try await admin.partitions(of: topic) } catch {
        // librdkafka's _TRANSPORT, _ALL_BROKERS_DOWN, _TIMED_OUT: the broker, not the topic.
        if error.code == .timedOut || [-195, -187, -185].contains(error.rdKafkaCode ?? 0) {
            throw KafkaError(code: error.code, message: "cannot reach the broker (\(error.message)): check --bootstrap-server or KAFKA_BOOTSTRAP_SERVERS",
                             rdKafkaCode: error.rdKafkaCode)
        }
        throw ValidationError("\(flag): topic '\(topic)' not found (\(error.message)); see `pipelinectl topics list`")
    }
}

/// SIGINT/SIGTERM for a command that stops gracefully: the first signal calls `onFirst` and
/// wakes ``wait()``; a second one says `secondSignal` on stderr, runs `onSecond` and exits 130.
final class StopSignal: @unchecked Sendable {  // `sources` set once in install(); `fired` and `waiters` behind the queue
    private let queue = DispatchQueue(label: "stop-signals")
    private let secondSignal: String
    private let onSecond: @Sendable () -> Void
    private let onFirst: @Sendable (Int32) -> Void
    private var sources: [DispatchSourceSignal] = []
    private var fired = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    init(secondSignal: String, onSecond: @escaping @Sendable () -> Void = {}, onFirst: @escaping @Sendable (Int32) -> Void = { _ in }) {
        self.secondSignal = secondSignal
        self.onSecond = onSecond
        self.onFirst = onFirst
    }

    func install() {
        for sig in [SIGINT, SIGTERM] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: queue)
            source.setEventHandler { [self] in
                if fired {
                    FileHandle.standardError.write(Data("second signal: \(secondSignal)\n".utf8))
                    onSecond()
                    exit(130)
                }
                fired = true
                onFirst(sig)
                let w = waiters
                waiters = []
                for c in w { c.resume() }
            }
            source.resume()
            sources.append(source)
        }
    }

    var isSet: Bool { queue.sync { fired } }

    func wait() async {
        await withCheckedContinuation { c in
            queue.async { [self] in
                if fired { c.resume() } else { waiters.append(c) }
            }
        }
    }
}

/// A long-running command's `/metrics`, `/healthz` and `/readyz`: bootstraps swift-metrics into a
/// Prometheus registry (once per process) and serves it on `--metrics-address`.
func metricsEndpoint(_ address: String, health: any HealthReporting, logger: Logger) throws -> HTTPEndpoint {
    let registry = PrometheusCollectorRegistry()
    MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
    do {
        return try HTTPEndpoint(address: address, registry: registry, health: health, logger: logger)
    } catch {
        throw ValidationError("--metrics-address: \(error)")
    }
}
