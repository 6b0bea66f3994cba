import ArgumentParser
import Foundation
import Pipeline
import TextTable
import Kafka
import Operations

/// `pipelinectl lag`: per group, topic and partition the committed offset, log end, lag and status.
struct Lag: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Consumer lag per group, topic and partition, with Burrow's status rules.",
        discussion: """
            For each partition: the committed offset, the log-end offset, the lag in records, the \
            lag in seconds (LAG-S: how long ago the log end passed the committed offset, \
            interpolated over the log ends observed, as kafka-lag-exporter does; `?` until two \
            observations can say, so give --samples 2 or more, or --watch), the age of the first \
            unconsumed record (AGE-S: now minus its own timestamp, read without joining the group; \
            replayed or late records read as far behind), the member that owns it, and a status \
            over a sliding window of observed commits, with Burrow's rules:
              OK      caught up somewhere in the window, or catching up
              WARN    offsets move but the lag never decreases over the window
              STALL   the same offset over the whole window while there is lag
              STOP    lag, and no commit for longer than the window spans, or no member left
              REWIND  the committed offset went backwards
              ERR     the log end could not be read, or the committed offset is past it
            A group's status is its worst partition's (the console shows the same word).

            The log-end offset is the high watermark of a fetch at the committed offset, never \
            ListOffsets (tansu answers ListOffsets(latest) too low for multi-record batches).

            One-shot, the window holds --samples observations taken --interval apart (with one, \
            only caught-up, no-member and error rules can fire). With --watch the table is redrawn \
            every --interval over the last --window observations, with each group's lag trend \
            (rising or falling, records/s) and the estimated time to drain.

            Exit code: 0 when every group is OK, 2 when the worst is WARN, 3 when some group is \
            STALL, STOP, REWIND or ERR.

            Examples:
              pipelinectl lag
              pipelinectl lag --group prices-candles --json
              pipelinectl lag --watch --interval 5s
              pipelinectl lag --samples 3 --interval 10s || alert "consumer lag"
            """)

    @Option(name: .customLong("group"), help: "Only this group (repeatable; default: every group).") var groups: [String] = []
    @Option(name: .customLong("topic"), help: "Only this topic (repeatable; default: every topic the group committed).") var topics: [String] = []
    @Flag(help: "Redraw every --interval until interrupted, with trends.") var watch = false
    @Option(help: "Time between observations (default: 5s).", transform: { text in
        guard let ms = TimeSpec.duration(text), ms > 0 else { throw ValidationError("--interval: '\(text)' is not a duration such as 5s or 500ms") }
        return Duration.milliseconds(ms)
    })
    var interval: Duration = .seconds(5)
    @Option(help: "Observations kept per partition for the status (Burrow's window).") var window = 10
    @Option(help: "One-shot: observations to take before answering.") var samples = 1
    @Flag(help: "JSON instead of a table (with --watch, one JSON document per line per round).") var json = false
    @OptionGroup var connection: RequiredConnection

    func validate() throws {
        guard window > 0 else { throw ValidationError("--window must be at least 1, got \(window)") }
        guard samples > 0 else { throw ValidationError("--samples must be at least 1, got \(samples)") }
        if watch, samples != 1 { throw ValidationError("--samples is for one-shot runs; --watch keeps sampling") }
    }

    struct Output: Encodable {
        var time: Int64
        var groups: [GroupOutput]
    }

    struct GroupOutput: Encodable {
        var group: GroupLag
        var totalLag: Int64
        var maxLagSeconds: Double?
        var trend: LagTrend?
    }

    func run() async throws {
        try Preflight.checkRuntime()
        let kafka = connection.kafka
        let admin = try KafkaAdmin(configuration: kafka)
        let probe = LagProbe(reader: TopicReader(kafka: kafka))
        var windows: [String: [TopicPartition: CommitWindow]] = [:]
        var groupWindows: [String: CommitWindow] = [:]
        var round = 0
        var last: [GroupOutput] = []
        do {
            while true {
                round += 1
                let names: [String]
                if groups.isEmpty {
                    names = try await admin.listGroups().map(\.group).filter { !$0.hasPrefix("pipelinectl-reader-") }
                } else {
                    names = groups
                }
                var outputs: [GroupOutput] = []
                for name in names {
                    var w = windows[name] ?? [:]
                    let lag = try await probe.groupLag(name, admin: admin, topics: topics.isEmpty ? nil : topics, windows: &w, windowSize: window)
                    windows[name] = w
                    var gw = groupWindows[name] ?? CommitWindow(capacity: window)
                    let committed = lag.partitions.reduce(Int64(0)) { $0 + $1.committed }
                    let ends = lag.partitions.reduce(Int64(0)) { $0 + ($1.logEnd ?? $1.committed) }
                    gw.append(CommitSample(offset: committed, logEnd: ends, time: nowMillis()))
                    groupWindows[name] = gw
                    outputs.append(GroupOutput(group: lag, totalLag: lag.totalLag, maxLagSeconds: lag.maxLagSeconds,
                                               trend: gw.samples.count > 1 ? LagTrend(window: gw.samples) : nil))
                }
                last = outputs
                let done = !watch && round >= samples
                if watch || done { render(outputs, clear: watch && !json && Terminal.stdoutIsTTY) }
                if done { break }
                try await Task.sleep(for: interval)
            }
        } catch is CancellationError {
        } catch {
            await admin.close()
            throw error
        }
        await admin.close()
        if watch { return }
        if groups.count == 1, last.isEmpty { throw ValidationError("--group \(groups[0]): no such group") }
        let worst = PartitionLagStatus(worstOf: last.map(\.group.status))
        if worst.isError { throw ExitCode(Exit.notOK) }
        if worst == .warn { throw ExitCode(Exit.warn) }
    }

    func render(_ outputs: [GroupOutput], clear: Bool) {
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = watch ? [.sortedKeys] : [.sortedKeys, .prettyPrinted]
            if let data = try? encoder.encode(Output(time: nowMillis(), groups: outputs)) { print(String(decoding: data, as: UTF8.self)) }
            fflush(nil)
            return
        }
        if clear { print("\u{1B}[H\u{1B}[2J", terminator: "") }
        if let table = Lag.table(outputs.map(\.group), paint: StatusPaint.self) {
            print(table)
            print("")
        }
        for o in outputs {
            let seconds = o.maxLagSeconds.map { String(format: "%.1f s", $0) } ?? "? s (two observations needed)"
            var line = "\(o.group.group): \(Terminal.status(o.group.status.rawValue))  \(o.group.members.count) members  lag \(o.totalLag) records, \(seconds)"
            if let t = o.trend {
                line += "  \(t.direction) " + String(format: "%.1f/s", abs(t.lagRate))
                line += "  drain " + (t.secondsToDrain.map(formatSeconds) ?? "never at this rate")
            }
            print(line)
        }
        if outputs.isEmpty { print("no consumer groups") }
        fflush(nil)  // --watch into a pipe: each round as it happens (nil: every stream; `stdout` is not concurrency-safe)
    }

    /// One line per partition of these groups; nil when none has a committed offset.
    static func table<Paint: CellPaint>(_ groups: [GroupLag], paint: Paint.Type = NoPaint.self) -> String? {
        let rows = groups.flatMap { g in g.partitions.map { (group: g.group, partition: $0) } }
        return TextTable<(group: String, partition: PartitionLag)> { row in
            let p = row.partition
            return [
                Column("GROUP" <- row.group), Column("TOPIC" <- p.topic), Column("PARTITION" <- p.partition, align: .right),
                Column("COMMITTED" <- p.committed, align: .right), Column("LOG-END" <- (p.logEnd.map(String.init) ?? "?"), align: .right),
                Column("LAG" <- (p.lagRecords.map(String.init) ?? "?"), align: .right),
                Column("LAG-S" <- (p.lagSeconds.map { String(format: "%.1f", $0) } ?? "?"), align: .right),
                Column("AGE-S" <- (p.recordAgeSeconds.map { String(format: "%.1f", $0) } ?? "?"), align: .right),
                Column("OWNER" <- (p.owner ?? "-")), Column("STATUS" <- p.status.rawValue),
            ]
        }.render(rows, paint: paint)
    }
}
