import Operations

/// Who may post to `pipelinectl ingest http`: one bearer token per client, read from a file
/// (`--token-file`) or the environment (`PIPELINE_INGEST_TOKENS`), never from a flag (a flag is
/// visible to every user of the machine in `ps`).
///
/// One client per line: `NAME TOKEN [STREAM,…]`; without streams the client may post to all
/// five. Blank lines and `#` comments are skipped; in the environment variable `;` also ends a
/// line. Tokens are at least 16 characters; names and tokens are unique.
public struct ClientTokens: Sendable {
    public struct Client: Sendable, Hashable {
        public var name: String
        /// nil: every stream.
        public var streams: Set<UpstreamStream>?

        public func mayPost(to stream: UpstreamStream) -> Bool { streams?.contains(stream) ?? true }
    }

    public struct ParseError: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    private let entries: [(token: [UInt8], client: Client)]

    public var clients: [Client] { entries.map(\.client) }

    /// Reads `text`; `source` names it in errors (`tokens.txt:3`, `$PIPELINE_INGEST_TOKENS`).
    public init(parsing text: String, source: String) throws(ParseError) {
        var entries: [(token: [UInt8], client: Client)] = []
        let lines = text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == ";" })
        for (number, raw) in lines.enumerated() {
            let line = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" }).map(String.init)
            guard !fields.isEmpty else { continue }
            let at = "\(source):\(number + 1)"
            guard fields.count == 2 || fields.count == 3 else {
                throw ParseError(description: "\(at): expected NAME TOKEN [STREAM,…], got \(fields.count) fields")
            }
            let (name, token) = (fields[0], fields[1])
            guard token.utf8.count >= 16 else { throw ParseError(description: "\(at): the token of '\(name)' is shorter than 16 characters") }
            var streams: Set<UpstreamStream>?
            if fields.count == 3 {
                var set = Set<UpstreamStream>()
                for s in fields[2].split(separator: ",") {
                    guard let stream = UpstreamStream(rawValue: String(s)) else {
                        throw ParseError(description: "\(at): unknown stream '\(s)' (streams: \(UpstreamStream.allCases.map(\.rawValue).joined(separator: ", ")))")
                    }
                    set.insert(stream)
                }
                streams = set
            }
            if entries.contains(where: { $0.client.name == name }) { throw ParseError(description: "\(at): client '\(name)' is named twice") }
            if entries.contains(where: { $0.token == Array(token.utf8) }) { throw ParseError(description: "\(at): the token of '\(name)' is another client's too") }
            entries.append((Array(token.utf8), Client(name: name, streams: streams)))
        }
        guard !entries.isEmpty else { throw ParseError(description: "\(source): no client (one per line: NAME TOKEN [STREAM,…])") }
        self.entries = entries
    }

    /// The client an `Authorization: Bearer …` header belongs to, or nil (no header, another
    /// scheme, an unknown token: one answer for all, so a caller learns nothing of which).
    /// Every token is compared in full whatever matches, in time independent of where they differ.
    public func client(authorization: String?) -> Client? {
        guard let authorization else { return nil }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        let presented = Array(parts[1].utf8)
        var found: Client?
        for entry in entries where ConstantTime.equal(entry.token, presented) { found = entry.client }
        return found
    }
}
