import ConsoleKitTerminal
import Foundation
import NIOConcurrencyHelpers

/// Progress while a command reads or writes records, on standard error and only when standard
/// error is a terminal (standard output carries the data; without a terminal there is no progress
/// output at all). ConsoleKit's `ActivityIndicator` redraws a `RecordProgress` ten times a second
/// on a `StandardErrorLine`; `finish()` (or the end of this object) erases the line.
final class ProgressIndicator: Sendable {
    private let indicator: ActivityIndicator<RecordProgress>?
    private let finished = NIOLockedValueBox(false)

    init(_ label: String, total: Int? = nil, enabled: Bool = Terminal.stderrIsTTY) {
        let console = StandardErrorLine()
        guard enabled, console.supportsANSICommands else {
            indicator = nil
            return
        }
        let indicator = RecordProgress(label: label, total: total).newActivity(for: console)
        indicator.start(refreshRate: 100)
        self.indicator = indicator
    }

    /// Records done so far (and the total, when it became known); `extra` follows the rate.
    func update(_ done: Int, total: Int? = nil, extra: String = "") {
        guard let indicator else { return }
        var activity = indicator.activity
        activity.done = done
        if let total { activity.total = total }
        activity.extra = extra
        indicator.activity = activity
    }

    /// Stops redrawing and erases the line. Safe to call more than once.
    func finish() {
        guard let indicator, finished.withLockedValue({ done in defer { done = true }; return !done }) else { return }
        indicator.succeed()  // RecordProgress draws nothing for success: the line stays erased
    }

    deinit { finish() }  // ActivityIndicator's timer must not outlive it
}

/// One line of progress: `label [bar] done/total ETA 12s 3400/s extra` when the total is known
/// (ConsoleKit's `ProgressBar`), `label [bar] done 3400/s extra` otherwise (its bouncing
/// `LoadingBar`). Nothing for the ready, success and failure states.
struct RecordProgress: ActivityIndicatorType {
    var label: String
    var total: Int?
    var done = 0
    var extra = ""
    let start = ContinuousClock.now
    private var bar: ProgressBar
    private let loading: LoadingBar

    init(label: String, total: Int? = nil) {
        self.label = label
        self.total = total
        // ConsoleKit hands out its bars only through a Console (their initializers are internal);
        // the indicators made here are never started.
        let console = StandardErrorLine()
        bar = console.progressBar(title: label).activity
        loading = console.loadingBar(title: label).activity
    }

    func outputActivityIndicator(to console: any Console, state: ActivityIndicatorState) {
        guard case .active(let tick) = state else { return }
        console.output(line(tick: tick, barWidth: console.activityBarWidth).consoleText())
    }

    func line(tick: UInt, barWidth: Int, now: ContinuousClock.Instant = .now) -> String {
        let rate = Double(done) / max(0.001, (now - start).seconds)
        var text: String
        if let total, total > 0 {
            var bar = self.bar
            bar.currentProgress = Double(done) / Double(total)
            text = "\(label) \(bar.renderActiveBar(tick: tick, width: barWidth).description) \(done)/\(total)"
            if rate > 0, done < total { text += " ETA \(formatSeconds(Double(total - done) / rate))" }
        } else {
            text = "\(label) \(loading.renderActiveBar(tick: tick, width: barWidth).description) \(done)"
        }
        text += String(format: " %.0f/s", rate)
        if !extra.isEmpty { text += " " + extra }
        return text
    }
}

/// A ConsoleKit `Console` that is one status line on standard error. ConsoleKit's own `Terminal`
/// writes to standard output, which carries pipelinectl's data. `output` replaces the line (plain
/// text, cut to the terminal's width so that it never wraps; `newLine` is ignored, the line stays
/// open for the next redraw) and `clear(.line)` erases it.
final class StandardErrorLine: Console {
    private let info = NIOLockedValueBox<[AnySendableHashable: any Sendable]>([:])

    var userInfo: [AnySendableHashable: any Sendable] {
        get { info.withLockedValue { $0 } }
        set { info.withLockedValue { $0 = newValue } }
    }

    var supportsANSICommands: Bool {
        isatty(STDERR_FILENO) == 1 && ProcessInfo.processInfo.environment["TERM"] != "dumb"
    }

    var size: (width: Int, height: Int) {
        var w = winsize()
        guard ioctl(STDERR_FILENO, UInt(TIOCGWINSZ), &w) == 0 else { return (0, 0) }
        return (Int(w.ws_col), Int(w.ws_row))
    }

    func input(isSecure: Bool) -> String { "" }  // a status line reads nothing

    func output(_ text: ConsoleText, newLine: Bool) {
        var line = text.description
        let width = size.width
        if width > 1, line.count >= width { line = String(line.prefix(width - 1)) }
        write("\r\u{1B}[2K" + line)
        didOutputLines(count: 1)
    }

    func clear(_ type: ConsoleClear) {
        switch type {
        case .line: write("\r\u{1B}[2K")
        case .screen: write("\u{1B}[2J")
        }
    }

    func report(error: String, newLine: Bool) { write(newLine ? error + "\n" : error) }

    private func write(_ text: String) { FileHandle.standardError.write(Data(text.utf8)) }
}
