// A WebDriver client for the console's browser tests: Debian's chromedriver driving headless
// Chromium over the W3C WebDriver protocol (JSON over HTTP), no Selenium needed. Spoken with
// AsyncHTTPClient: chromedriver writes header lines without a space after the colon, which
// Foundation's URLSession on Linux refuses ("Failed writing header").
import AsyncHTTPClient
import Foundation
import NIOCore
import Operations

struct WebDriverError: Error, CustomStringConvertible {
    var description: String
}

final class WebDriver {
    let driver: ManagedProcess.Handle
    let base: String
    let session: String

    static var available: Bool {
        FileManager.default.isExecutableFile(atPath: "/usr/bin/chromedriver") && FileManager.default.isExecutableFile(atPath: "/usr/bin/chromium")
    }

    /// Starts chromedriver on a free port and a headless Chromium session.
    static func start() async throws -> WebDriver {
        let port = try FreePort.find()
        let driver = try ManagedProcess.launch("/usr/bin/chromedriver", arguments: ["--port=\(port)"], environment: [:])
        try await driver.waitForLine(containing: "started successfully", timeout: .seconds(30))
        let base = "http://127.0.0.1:\(port)"
        let capabilities: [String: Any] = [
            "capabilities": [
                "alwaysMatch": [
                    "browserName": "chrome",
                    "goog:chromeOptions": [
                        "binary": "/usr/bin/chromium",
                        "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"],
                    ],
                    "goog:loggingPrefs": ["browser": "ALL"],
                ] as [String: Any],
            ],
        ]
        let answer = try await call(base + "/session", method: "POST", body: capabilities)
        guard let value = answer["value"] as? [String: Any], let session = value["sessionId"] as? String else {
            driver.kill()
            throw WebDriverError(description: "no session: \(answer)")
        }
        return WebDriver(driver: driver, base: base, session: session)
    }

    private init(driver: ManagedProcess.Handle, base: String, session: String) {
        self.driver = driver
        self.base = base
        self.session = session
    }

    @discardableResult
    static func call(_ url: String, method: String, body: Any? = nil) async throws -> [String: Any] {
        var request = HTTPClientRequest(url: url)
        request.method = .init(rawValue: method)
        if let body {
            request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: body)))
            request.headers.add(name: "Content-Type", value: "application/json")
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(60))
        let data = Data(try await response.body.collect(upTo: 64 << 20).readableBytesView)
        guard let object = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw WebDriverError(description: "not JSON from \(url): \(String(decoding: data, as: UTF8.self))")
        }
        if let value = object["value"] as? [String: Any], let error = value["error"] as? String {
            throw WebDriverError(description: "\(method) \(url): \(error): \(value["message"] ?? "")")
        }
        return object
    }

    func go(_ url: String) async throws {
        try await Self.call("\(base)/session/\(session)/url", method: "POST", body: ["url": url])
    }

    /// Runs `script` (a function body) in the page and returns its result.
    func run(_ script: String, _ arguments: [Any] = []) async throws -> Any? {
        try await Self.call("\(base)/session/\(session)/execute/sync", method: "POST", body: ["script": script, "args": arguments])["value"]
    }

    func screenshot(to path: String) async throws {
        let answer = try await Self.call("\(base)/session/\(session)/screenshot", method: "GET")
        guard let text = answer["value"] as? String, let data = Data(base64Encoded: text) else { throw WebDriverError(description: "no screenshot") }
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try data.write(to: URL(fileURLWithPath: path))
    }

    /// The browser console's entries since the last call (level, message).
    func consoleLog() async throws -> [(level: String, message: String)] {
        let answer = try await Self.call("\(base)/session/\(session)/se/log", method: "POST", body: ["type": "browser"])
        return (answer["value"] as? [[String: Any]] ?? []).map { ($0["level"] as? String ?? "", $0["message"] as? String ?? "") }
    }

    func quit() async {
        _ = try? await Self.call("\(base)/session/\(session)", method: "DELETE")
        driver.terminate()
        _ = await driver.waitForExit()
    }
}
