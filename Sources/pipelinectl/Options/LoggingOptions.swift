import ArgumentParser
import Logging
import Pipeline

/// `--log-level` and `--log-format` for long-running commands.
struct LoggingOptions: ParsableArguments {
    enum Format: String, ExpressibleByArgument, CaseIterable { case text, json }

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.") var logLevel: Logger.Level = .info
    @Option(help: "Log format: text, or json (one object per line).") var logFormat: Format = .text

    /// Sets up swift-log once for the process and returns the command's logger.
    func bootstrap(label: String) -> Logger {
        let level = logLevel
        switch logFormat {
        case .text:
            LoggingSystem.bootstrap { label in
                var h = StreamLogHandler.standardError(label: label)
                h.logLevel = level
                return h
            }
        case .json:
            LoggingSystem.bootstrap { label in
                var h = JSONLogHandler(label: label)
                h.logLevel = level
                return h
            }
        }
        var logger = Logger(label: label)
        logger.logLevel = level
        return logger
    }
}
