/// Appends compact JSON to a byte buffer. Used for transform outputs, notifications and dead letters;
/// writes keys in the order given so outputs are byte-for-byte deterministic (golden tests,
/// dedupe).
public struct JSONWriter: Sendable {
    /// The bytes written so far. Reading it trims the zeroed slack the writer keeps ahead.
    public var bytes: [UInt8] {
        mutating get {
            if storage.count > count { storage.removeLast(storage.count - count) }
            return storage
        }
    }
    /// Written bytes, then zeroed slack: every write is one capacity check and plain stores into
    /// the buffer, not an `append` per byte or per piece.
    private var storage: [UInt8]
    private var count = 0
    /// Whether the next value in the current container needs a comma first.
    private var needsComma = false

    public init(capacity: Int = 256) { storage = Array(repeating: 0, count: max(capacity, 16)) }

    /// A writer that continues `bytes`, whose first `count` are written and the rest room (what
    /// ``TransformOutput`` writes its values with: no buffer of the writer's own);
    /// ``finishKeepingRoom()`` gives them back with the value after them.
    init(continuing bytes: consuming [UInt8], count: Int) {
        self.count = count
        storage = bytes
    }

    /// The buffer and how many of its bytes are written, the writer ended: the buffer is handed
    /// over, not shared (a copy of ``bytes`` would share it until the writer goes, and the next
    /// append would copy it all), its room after the value kept for the next writer.
    consuming func finishKeepingRoom() -> (bytes: [UInt8], count: Int) {
        (storage, count)
    }

    /// The largest room written in place when the buffer has it (larger rooms, and rooms over
    /// ``smallRoom`` when the buffer is short, are written on the stack and appended).
    static var largestRoomInPlace: Int { stackRoom }

    /// Runs `body` with a ``Cursor`` over room for `room` more bytes: one capacity check and one
    /// access to the buffer for everything `body` writes, however many pieces. `room` must bound
    /// what it writes (each ``Cursor`` method says its bound).
    ///
    /// Without that much slack, a large room (a whole tick) is written on the stack and appended:
    /// growing the buffer by zeros first would fill as many bytes as the bound, not as were
    /// written, and a writer that continues a ``TransformOutput`` starts with no slack for every value.
    @inline(__always)
    mutating func withRoom(_ room: Int, _ body: (inout Cursor) -> Void) {
        if count &+ room > storage.count {
            if room > Self.smallRoom && room <= Self.stackRoom {
                if storage.count > count { storage.removeLast(storage.count &- count) }
                var comma = needsComma
                let written = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: room) { scratch in
                    var cursor = Cursor(scratch.baseAddress!, needsComma: comma)
                    body(&cursor)
                    comma = cursor.needsComma
                    storage.append(contentsOf: UnsafeBufferPointer(start: scratch.baseAddress, count: cursor.written))
                    return cursor.written
                }
                precondition(written <= room, "JSONWriter: wrote \(written) bytes into room for \(room)")  // a wrong bound is a bug
                count &+= written
                needsComma = comma
                return
            }
            ZeroRoom.add(atLeast: max(256, count &+ room &- storage.count), to: &storage)
        }
        let start = count
        var comma = needsComma
        let written = storage.withUnsafeMutableBufferPointer { buffer in
            var cursor = Cursor(buffer.baseAddress! + start, needsComma: comma)
            body(&cursor)
            comma = cursor.needsComma
            return cursor.written
        }
        precondition(written <= room, "JSONWriter: wrote \(written) bytes into room for \(room)")  // a wrong bound is a bug
        count &+= written
        needsComma = comma
    }

    /// Rooms up to this take the buffer's zeroed slack, grown by at least 256 bytes when short.
    private static let smallRoom = 128
    /// Rooms up to this are written on the stack when the slack is short (a temporary allocation
    /// of up to 1 KiB stays on the stack).
    private static let stackRoom = 1024

    public mutating func beginObject() { withRoom(2) { $0.beginObject() } }
    public mutating func endObject() { withRoom(1) { $0.endObject() } }
    public mutating func beginArray() { withRoom(2) { $0.beginArray() } }
    public mutating func endArray() { withRoom(1) { $0.endArray() } }

    /// Writes `"name":` for a literal key; the next call writes its value.
    @inline(__always)
    public mutating func key(_ name: StaticString) {
        // A one-scalar literal has no pointer; a literal with a quote, backslash or control byte needs escaping.
        guard name.hasPointerRepresentation,
              Self.isPlain(UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        else { return key(text: name.description) }
        withRoom(Cursor.room(key: name)) { $0.key(name) }
    }

    /// Writes `"name":` for a key known only at run time (escaped when it needs it).
    public mutating func key(text name: String) {
        var name = name
        name.withUTF8 { utf8 in
            // The exact room when nothing needs escaping (a long text would otherwise reserve six times its size).
            let plain = Self.isPlain(utf8)
            withRoom(plain ? utf8.count &+ 4 : Cursor.room(key: utf8.count)) { $0.key(utf8: utf8, plain: plain) }
        }
    }

    public mutating func string(_ s: String) {
        var s = s
        // Native strings are contiguous UTF-8.
        s.withUTF8 { string(utf8: $0) }
    }

    /// A string given as UTF-8 bytes (valid UTF-8: text a decoder kept, see ``TextBuffer``).
    mutating func string(utf8: UnsafeBufferPointer<UInt8>) {
        let plain = Self.isPlain(utf8)
        withRoom(plain ? utf8.count &+ 3 : Cursor.room(string: utf8.count)) { $0.string(utf8: utf8, plain: plain) }
    }

    public mutating func int(_ v: Int64) { withRoom(Cursor.numberRoom) { $0.int(v) } }
    public mutating func int(_ v: Int) { int(Int64(v)) }
    public mutating func bool(_ v: Bool) { withRoom(6) { $0.bool(v) } }
    public mutating func null() { withRoom(5) { $0.null() } }

    /// Shortest representation that reads back to the same Double; non-finite values (which the
    /// decoders never produce) are written as null since JSON has no NaN.
    public mutating func double(_ v: Double) { withRoom(Cursor.numberRoom) { $0.double(v) } }

    /// `s` as a JSON string literal, quotes included (the one JSON string escaper of the project).
    public static func quoted(_ s: String) -> String {
        var w = JSONWriter(capacity: s.utf8.count + 2)
        w.string(s)
        return String(decoding: w.bytes, as: UTF8.self)
    }

    /// Embeds already-encoded JSON (trusted: produced by this writer).
    public mutating func raw(_ json: [UInt8]) {
        json.withUnsafeBufferPointer { utf8 in withRoom(utf8.count &+ 1) { $0.raw(utf8) } }
    }

    public mutating func optional(_ v: String?) { if let v { string(v) } else { null() } }
    public mutating func optional(_ v: Double?) { if let v { double(v) } else { null() } }
    public mutating func optional(_ v: Int64?) { if let v { int(v) } else { null() } }

    /// Writes JSON straight into room a ``JSONWriter`` reserved (``JSONWriter/withRoom(_:_:)``):
    /// plain stores, no checks per piece. Each method's bound is what it may write, its comma
    /// included: the static `room` functions and ``numberRoom``.
    struct Cursor {
        private let start: UnsafeMutablePointer<UInt8>
        private var out: UnsafeMutablePointer<UInt8>
        /// Whether the next value in the current container needs a comma first.
        fileprivate(set) var needsComma: Bool

        fileprivate init(_ start: UnsafeMutablePointer<UInt8>, needsComma: Bool) {
            self.start = start
            out = start
            self.needsComma = needsComma
        }

        var written: Int { out - start }

        /// A number: a comma and at most 24 characters (`-1.7976931348623157e+308`).
        static let numberRoom = 32
        /// A key of `n` UTF-8 bytes: a comma, quotes, colon and each byte escaped at worst (`\u001f`).
        static func room(key n: Int) -> Int { n &* 6 &+ 4 }
        static func room(key name: StaticString) -> Int {
            room(key: name.hasPointerRepresentation ? name.utf8CodeUnitCount : 4)  // one scalar: at most 4 bytes
        }
        /// A string of `n` UTF-8 bytes, with its comma and quotes.
        static func room(string n: Int) -> Int { n &* 6 &+ 3 }

        @inline(__always)
        private mutating func put(_ byte: UInt8) {
            out.pointee = byte
            out += 1
        }

        @inline(__always)
        private mutating func put(_ utf8: UnsafeBufferPointer<UInt8>) {
            guard let source = utf8.baseAddress else { return }
            ShortBytes.copy(from: UnsafeRawPointer(source), to: UnsafeMutableRawPointer(out), count: utf8.count)
            out += utf8.count
        }

        @inline(__always)
        private mutating func put(_ s: StaticString) {
            s.withUTF8Buffer { put($0) }
        }

        @inline(__always)
        private mutating func separate() {
            if needsComma { put(UInt8(ascii: ",")) }
            needsComma = true
        }

        mutating func beginObject() { separate(); put(UInt8(ascii: "{")); needsComma = false }
        mutating func endObject() { put(UInt8(ascii: "}")); needsComma = true }
        mutating func beginArray() { separate(); put(UInt8(ascii: "[")); needsComma = false }
        mutating func endArray() { put(UInt8(ascii: "]")); needsComma = true }

        /// `"name":` for a literal key (no String bridging: the bytes the literal holds), which
        /// must need no escaping (``JSONWriter/key(_:)`` checks; here it is asserted).
        @inline(__always)
        mutating func key(_ name: StaticString) {
            guard let utf8 = Self.plain(name) else {
                var text = name.description
                return text.withUTF8 { key(utf8: $0) }
            }
            key(utf8: utf8, plain: true)
        }

        /// A key written as one literal with its quotes, its colon and the comma before it
        /// (`,"trade_price":`; the first key of an object has no comma): for a writer that knows
        /// its keys' order, one copy per key. Asserted: quoted, ending in a colon, a comma exactly
        /// where one is due.
        @inline(__always)
        mutating func member(_ literal: StaticString) {
            assert(literal.hasPointerRepresentation && literal.utf8CodeUnitCount >= 3, "member \(literal): write it with key(_:)")
            assert(literal.utf8Start[literal.utf8CodeUnitCount - 1] == UInt8(ascii: ":"), "member \(literal) needs its colon")
            assert((literal.utf8Start[0] == UInt8(ascii: ",")) == needsComma, "member \(literal): a comma is due only after a value")
            put(UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
            needsComma = false
        }

        @inline(__always)
        mutating func key(utf8: UnsafeBufferPointer<UInt8>) { key(utf8: utf8, plain: JSONWriter.isPlain(utf8)) }

        @inline(__always)
        mutating func key(utf8: UnsafeBufferPointer<UInt8>, plain: Bool) {
            if needsComma { put(UInt8(ascii: ",")) }
            putQuoted(utf8, plain: plain)
            put(UInt8(ascii: ":"))
            needsComma = false
        }

        @inline(__always)
        mutating func string(utf8: UnsafeBufferPointer<UInt8>) { string(utf8: utf8, plain: JSONWriter.isPlain(utf8)) }

        /// `plain`: the caller found that nothing in `utf8` needs escaping.
        @inline(__always)
        mutating func string(utf8: UnsafeBufferPointer<UInt8>, plain: Bool) {
            separate()
            // Most strings need no escape: one copy.
            putQuoted(utf8, plain: plain)
        }

        /// A string literal (an enum's raw value, `ticker`) that needs no escaping (asserted).
        @inline(__always)
        mutating func string(_ s: StaticString) {
            guard let utf8 = Self.plain(s) else {
                var text = s.description
                return text.withUTF8 { string(utf8: $0) }
            }
            string(utf8: utf8, plain: true)
        }

        /// A literal's bytes; nil for a one-scalar literal (it has no pointer). The literals of
        /// this code base need no escaping: asserted (tests run with asserts), not checked per write.
        @inline(__always)
        private static func plain(_ literal: StaticString) -> UnsafeBufferPointer<UInt8>? {
            guard literal.hasPointerRepresentation else { return nil }
            let utf8 = UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount)
            assert(JSONWriter.isPlain(utf8), "literal \(literal) needs escaping: write it as a String")
            return utf8
        }

        /// `utf8` in quotes, escaped unless `plain`.
        @inline(__always)
        private mutating func putQuoted(_ utf8: UnsafeBufferPointer<UInt8>, plain: Bool) {
            put(UInt8(ascii: "\""))
            if plain { put(utf8) } else { putEscaped(utf8) }
            put(UInt8(ascii: "\""))
        }

        mutating func string(_ s: String) {
            var s = s
            s.withUTF8 { string(utf8: $0) }
        }

        mutating func int(_ v: Int64) { separate(); putFixed(v.magnitude, fractionDigits: 0, negative: v < 0) }
        mutating func bool(_ v: Bool) { separate(); put(v ? "true" : "false") }
        mutating func null() { separate(); put("null") }
        mutating func raw(_ json: UnsafeBufferPointer<UInt8>) { separate(); put(json) }

        /// See ``JSONWriter/double(_:)``.
        mutating func double(_ v: Double) {
            separate()
            guard v.isFinite else { put("null"); return }
            if abs(v) < 1e15, v == Double(Int64(v)) {
                putFixed(Int64(v).magnitude, fractionDigits: 0, negative: v < 0)
            } else if !putShortDecimal(v) {
                var text = v.description
                text.withUTF8 { put($0) }
            }
        }

        /// A price or a volume with a few decimals (`1234.5`, `0.0123`), the common case, written to
        /// the same bytes as `description` without it: the fewest fractional digits `k` whose
        /// decimal reads back as `v`. `v * 10^k` must come out as an integer `n` with `n / 10^k == v`
        /// (exact: both are below 2^52, and IEEE division rounds as a parser does; `n` is then the
        /// nearest such decimal), and neither `k - 1` digit neighbour may read back as `v` (else it
        /// is shorter). False leaves the value to `description` (exponents, long fractions).
        private mutating func putShortDecimal(_ v: Double) -> Bool {
            let magnitude = abs(v)
            guard magnitude >= 1e-3, magnitude < 1e7 else { return false }
            for k in 1...8 {
                let p = powersOfTen[k]
                let scaled = magnitude * p
                guard scaled < 4.0e15 else { return false }
                let n = scaled.rounded(.towardZero)
                guard n == scaled else { continue }
                guard n / p == magnitude else { return false }
                let whole = UInt64(n)
                let shorter = powersOfTen[k - 1]
                if Double(whole / 10) / shorter == magnitude || Double(whole / 10 + 1) / shorter == magnitude { return false }
                putFixed(whole, fractionDigits: k, negative: v < 0)
                return true
            }
            return false
        }

        /// `whole / 10^fractionDigits` in fixed notation (an integer for 0), with at least one digit
        /// before the point. All digits are written two at a time by one division by 100 each (a
        /// digit at a time, the fraction cost a division per digit): with a point, one place to
        /// the right of where they end up, and the integer part then moved back over the gap.
        private mutating func putFixed(_ whole: UInt64, fractionDigits: Int, negative: Bool) {
            if negative { put(UInt8(ascii: "-")) }
            let digits = DecimalDigits.count(whole)
            if fractionDigits == 0 {
                var i = digits
                DecimalDigits.write(whole, out, &i)
                out += digits
            } else if digits > fractionDigits {
                var i = digits &+ 1
                DecimalDigits.write(whole, out, &i)
                let integerDigits = digits &- fractionDigits
                ShortBytes.copy(from: UnsafeRawPointer(out + 1), to: UnsafeMutableRawPointer(out), count: integerDigits)
                out[integerDigits] = UInt8(ascii: ".")
                out += digits &+ 1
            } else {
                // `0.` and the zeros before the first digit (`0.0123`).
                out[0] = UInt8(ascii: "0")
                out[1] = UInt8(ascii: ".")
                var i = 2
                while i < 2 &+ fractionDigits &- digits {
                    out[i] = UInt8(ascii: "0")
                    i &+= 1
                }
                i = 2 &+ fractionDigits
                DecimalDigits.write(whole, out, &i)
                out += 2 &+ fractionDigits
            }
        }

        private mutating func putEscaped(_ utf8: UnsafeBufferPointer<UInt8>) {
            for b in utf8 {
                switch b {
                case UInt8(ascii: "\""): put(#"\""#)
                case UInt8(ascii: "\\"): put(#"\\"#)
                case 0x0A: put(#"\n"#)
                case 0x0D: put(#"\r"#)
                case 0x09: put(#"\t"#)
                case 0..<0x20:
                    let hex: StaticString = "0123456789abcdef"
                    put(#"\u00"#)
                    put(hex.utf8Start[Int(b >> 4)])
                    put(hex.utf8Start[Int(b & 15)])
                default: put(b)
                }
            }
        }
    }

    /// No byte of `utf8` needs an escape in a JSON string (eight bytes at a time, then the rest).
    @inline(__always)
    fileprivate static func isPlain(_ utf8: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = utf8.baseAddress else { return true }
        var i = 0
        while i &+ 8 <= utf8.count {
            if JSONSpecialBytes.present(in: UnsafeRawPointer(base).loadUnaligned(fromByteOffset: i, as: UInt64.self)) { return false }
            i &+= 8
        }
        while i < utf8.count {
            let b = base[i]
            if b < 0x20 || b == 0x22 || b == 0x5C { return false }
            i &+= 1
        }
        return true
    }
}

/// The bytes a JSON string cannot hold as they are: `"`, `\\` and control characters.
enum JSONSpecialBytes {
    /// Whether any of the eight bytes of `word` (little-endian) is one of them. The classic exact
    /// "has a zero byte" / "has a byte below n" bit tricks: no false positive, no false negative.
    @inline(__always)
    static func present(in word: UInt64) -> Bool { mask(word) != 0 }

    /// The high bit of each flagged byte of `word` (loaded little-endian: byte 0 in the lowest
    /// bits). A borrow can flag a byte above a special one that is not special itself, never
    /// one below it, so the lowest flag is exact: `mask.trailingZeroBitCount / 8` is the index of
    /// the first special byte.
    @inline(__always)
    static func mask(_ word: UInt64) -> UInt64 {
        let w = UInt64(littleEndian: word)
        let quote = w ^ 0x2222_2222_2222_2222
        let backslash = w ^ 0x5C5C_5C5C_5C5C_5C5C
        let special =
            ((quote &- 0x0101_0101_0101_0101) & ~quote)
            | ((backslash &- 0x0101_0101_0101_0101) & ~backslash)
            | ((w &- 0x2020_2020_2020_2020) & ~w)
        return special & 0x8080_8080_8080_8080
    }
}

/// Room at the end of a byte buffer that is written in place: zeros appended from a block of
/// them (a `repeatElement` append stores them one by one).
enum ZeroRoom {
    @inline(never)
    static func add(atLeast needed: Int, to bytes: inout [UInt8]) {
        var left = needed
        while left > 0 {
            let n = min(left, zeros.count)
            bytes.append(contentsOf: zeros[..<n])
            left -= n
        }
    }

    private static let zeros = [UInt8](repeating: 0, count: 8192)
}

/// Short byte strings (keys, enum values, market codes) copied and compared with two
/// overlapping loads (and stores) of the widest word that fits, not a call into `memcpy` (whose
/// entry and size dispatch cost more than the copy itself at these sizes) or a loop per byte.
/// Longer copies go to `memmove`. A copy may overlap its source when the target is below it (both
/// words are loaded before either is stored; short ones go a byte at a time from the first).
enum ShortBytes {
    @inline(__always)
    static func copy(from source: UnsafeRawPointer, to target: UnsafeMutableRawPointer, count n: Int) {
        if n >= 8, n <= 16 {
            // The first eight bytes and the last eight (overlapping below 16).
            let a = source.loadUnaligned(as: UInt64.self)
            let b = source.loadUnaligned(fromByteOffset: n &- 8, as: UInt64.self)
            target.storeBytes(of: a, as: UInt64.self)
            target.storeBytes(of: b, toByteOffset: n &- 8, as: UInt64.self)
        } else if n > 16, n <= 32 {
            let a = source.loadUnaligned(as: SIMD16<UInt8>.self)
            let b = source.loadUnaligned(fromByteOffset: n &- 16, as: SIMD16<UInt8>.self)
            target.storeBytes(of: a, as: SIMD16<UInt8>.self)
            target.storeBytes(of: b, toByteOffset: n &- 16, as: SIMD16<UInt8>.self)
        } else if n >= 4, n < 8 {
            let a = source.loadUnaligned(as: UInt32.self)
            let b = source.loadUnaligned(fromByteOffset: n &- 4, as: UInt32.self)
            target.storeBytes(of: a, as: UInt32.self)
            target.storeBytes(of: b, toByteOffset: n &- 4, as: UInt32.self)
        } else if n < 4 {
            var i = 0
            while i < n {
                target.storeBytes(of: source.load(fromByteOffset: i, as: UInt8.self), toByteOffset: i, as: UInt8.self)
                i &+= 1
            }
        } else {
            target.copyMemory(from: source, byteCount: n)
        }
    }

    /// Whether the `n` bytes at `a` and at `b` are equal.
    @inline(__always)
    static func equal(_ a: UnsafeRawPointer, _ b: UnsafeRawPointer, count n: Int) -> Bool {
        if n >= 8, n <= 16 {
            return a.loadUnaligned(as: UInt64.self) == b.loadUnaligned(as: UInt64.self)
                && a.loadUnaligned(fromByteOffset: n &- 8, as: UInt64.self) == b.loadUnaligned(fromByteOffset: n &- 8, as: UInt64.self)
        }
        if n >= 4, n < 8 {
            return a.loadUnaligned(as: UInt32.self) == b.loadUnaligned(as: UInt32.self)
                && a.loadUnaligned(fromByteOffset: n &- 4, as: UInt32.self) == b.loadUnaligned(fromByteOffset: n &- 4, as: UInt32.self)
        }
        var i = 0
        while i < n {
            if a.load(fromByteOffset: i, as: UInt8.self) != b.load(fromByteOffset: i, as: UInt8.self) { return false }
            i &+= 1
        }
        return true
    }
}
