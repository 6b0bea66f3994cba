/// Parses the upstream date-times (`yyyy-MM-dd'T'HH:mm:ss` with optional fraction of any length,
/// optional `Z` or `±HH:mm`) straight from bytes into epoch milliseconds.
///
/// Dates without a zone are local time at `defaultOffsetSeconds` (Korean time, +09:00, for the
/// upstream APIs). No Foundation formatter: they are slow, locale-dependent and not Sendable.
enum LocalDateTime {
    static func epochMillis(_ raw: UnsafeRawBufferPointer, defaultOffsetSeconds: Int) -> Int64? {
        let n = raw.count
        guard n >= 19, let p = raw.baseAddress else { return nil }
        // `yyyy-MM-ddTHH:mm:ss` checked a word at a time: three loads cover bytes 0-18.
        @inline(__always) func word(_ offset: Int) -> UInt64 {
            UInt64(littleEndian: p.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        }
        let w0 = word(0), w1 = word(8), w2 = word(11)  // yyyy-MM-  ddTHH:mm  HH:mm:ss
        guard Self.digits(w0, 0x00FF_FF00_FFFF_FFFF), Self.digits(w1, 0xFFFF_00FF_FF00_FFFF),
            Self.digits(w2, 0xFFFF_0000_0000_0000),
            w0 & 0xFF00_00FF_0000_0000 == 0x2D00_002D_0000_0000,  // '-' at 4 and 7
            w1 & 0x0000_FF00_0000_0000 == 0x0000_3A00_0000_0000,  // ':' at 13
            w2 & 0x0000_FF00_0000_0000 == 0x0000_3A00_0000_0000,  // ':' at 16
            raw[10] == UInt8(ascii: "T") || raw[10] == UInt8(ascii: " ")
        else { return nil }
        // Digits checked above: no step can overflow.
        @inline(__always) func d(_ i: Int) -> Int { Int(raw[i] &- 0x30) }
        let year = d(0) &* 1000 &+ d(1) &* 100 &+ d(2) &* 10 &+ d(3)
        let month = d(5) &* 10 &+ d(6), day = d(8) &* 10 &+ d(9)
        let hour = d(11) &* 10 &+ d(12), minute = d(14) &* 10 &+ d(15), second = d(17) &* 10 &+ d(18)
        guard month >= 1, month <= 12, day >= 1, day <= daysInMonth(year, month), hour < 24, minute < 60, second < 60
        else { return nil }
        var i = 19
        var millis = 0
        if i < n, raw[i] == UInt8(ascii: ".") {
            i += 1
            let fracStart = i
            // Milliseconds from the first three digits; the rest are read and dropped.
            while i < n, raw[i] &- 0x30 < 10 {
                if i &- fracStart < 3 { millis = millis &* 10 &+ Int(raw[i] &- 0x30) }
                i += 1
            }
            for _ in min(i &- fracStart, 3)..<3 { millis &*= 10 }
            guard i > fracStart, i - fracStart <= 9 else { return nil }
        }
        var offset = defaultOffsetSeconds
        if i < n {
            if raw[i] == UInt8(ascii: "Z"), i + 1 == n {
                offset = 0
            } else if raw[i] == UInt8(ascii: "+") || raw[i] == UInt8(ascii: "-"), n - i == 6,
                raw[i + 3] == UInt8(ascii: ":"), let oh = twoDigits(raw, i + 1), let om = twoDigits(raw, i + 4), oh < 24, om < 60
            {
                offset = (oh * 3600 + om * 60) * (raw[i] == UInt8(ascii: "-") ? -1 : 1)
            } else {
                return nil
            }
        }
        // Years 0-9999 and offsets under a day: far from overflow.
        let days = daysFromCivil(year, month, day)
        let seconds = days &* 86_400 &+ hour &* 3600 &+ minute &* 60 &+ second &- offset
        return Int64(seconds) &* 1000 &+ Int64(millis)
    }

    /// Whether every byte of `word` selected by `mask` (0xFF per byte) is an ASCII digit. A byte
    /// is a digit when its high nibble is 3 both as it is and plus 6; a carry out of a byte (one
    /// of 0xFA or more) can only follow a byte that already failed the first test.
    @inline(__always)
    static func digits(_ word: UInt64, _ mask: UInt64) -> Bool {
        let high = 0xF0F0_F0F0_F0F0_F0F0 & mask, three = 0x3030_3030_3030_3030 & mask
        return word & high == three && (word &+ 0x0606_0606_0606_0606) & high == three
    }

    private static func twoDigits(_ raw: UnsafeRawBufferPointer, _ i: Int) -> Int? {
        let a = raw[i] &- 0x30, b = raw[i + 1] &- 0x30
        guard a < 10, b < 10 else { return nil }
        return Int(a) * 10 + Int(b)
    }

    /// Days since 1970-01-01 (Howard Hinnant's algorithm, proleptic Gregorian).
    static func daysFromCivil(_ y0: Int, _ m: Int, _ d: Int) -> Int {
        let y = m <= 2 ? y0 - 1 : y0
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (m + 9) % 12
        let doy = (153 * mp + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    static func daysInMonth(_ y: Int, _ m: Int) -> Int {
        switch m {
        case 2: return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    /// `yyyy-MM-dd'T'HH:mm:ss.SSS'Z'` for an epoch-ms value (outputs are always UTC).
    static func isoUTC(_ millis: Int64) -> String {
        let ms = Int(((millis % 1000) + 1000) % 1000)
        let totalSeconds = Int((millis - Int64(ms)) / 1000)
        var days = totalSeconds / 86_400
        var secs = totalSeconds % 86_400
        if secs < 0 { secs += 86_400; days -= 1 }
        let (y, m, d) = civilFromDays(days)
        func pad(_ v: Int, _ w: Int) -> String {
            let s = String(v)
            return s.count >= w ? s : String(repeating: "0", count: w - s.count) + s
        }
        return "\(pad(y, 4))-\(pad(m, 2))-\(pad(d, 2))T\(pad(secs / 3600, 2)):\(pad(secs / 60 % 60, 2)):\(pad(secs % 60, 2)).\(pad(ms, 3))Z"
    }

    static func civilFromDays(_ z0: Int) -> (Int, Int, Int) {
        let z = z0 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let y = yoe + era * 400
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (m <= 2 ? y + 1 : y, m, d)
    }
}
