/// A PNG writer for generated images (test fixtures, `pipelinectl dev`'s sample images): 8-bit
/// RGB or RGBA, deflate with stored (uncompressed) blocks, which every decoder must accept.
public enum StoredPNG {
    /// A PNG of `width` x `height` pixels from `raw`: per row a filter byte (0) and the pixels.
    /// `alpha` selects RGBA (colour type 6) over RGB (2).
    public static func encode(width: Int, height: Int, alpha: Bool = false, raw: [UInt8]) -> [UInt8] {
        container(width: width, height: height, colourType: alpha ? 6 : 2, idat: zlibStored(raw))
    }

    /// The PNG signature and chunks around an IDAT payload as given (a fixture may lie in it).
    public static func container(width: Int, height: Int, colourType: UInt8, idat: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        // Depth 8, the colour type, deflate, adaptive filtering, no interlace.
        out += chunk("IHDR", be32(width) + be32(height) + [8, colourType, 0, 0, 0])
        out += chunk("IDAT", idat)
        out += chunk("IEND", [])
        return out
    }

    /// A zlib stream of stored deflate blocks.
    public static func zlibStored(_ data: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [0x78, 0x01]
        var offset = 0
        repeat {
            let count = min(65_535, data.count - offset)
            out.append(offset + count == data.count ? 1 : 0)
            out += [UInt8(count & 0xff), UInt8(count >> 8), UInt8(~count & 0xff), UInt8((~count >> 8) & 0xff)]
            out += data[offset..<offset + count]
            offset += count
        } while offset < data.count
        var a: UInt32 = 1
        var b: UInt32 = 0
        for byte in data {
            a = (a + UInt32(byte)) % 65_521
            b = (b + a) % 65_521
        }
        return out + be32(Int(b << 16 | a))
    }

    private static func chunk(_ type: String, _ body: [UInt8]) -> [UInt8] {
        let typed = Array(type.utf8) + body
        return be32(body.count) + typed + be32(Int(crc32(typed)))
    }

    private static let crcTable: [UInt32] = (0..<256).map { n in
        var c = UInt32(n)
        for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    private static func crc32(_ data: [UInt8]) -> UInt32 {
        var c: UInt32 = 0xFFFF_FFFF
        for byte in data { c = crcTable[Int((c ^ UInt32(byte)) & 0xff)] ^ (c >> 8) }
        return c ^ 0xFFFF_FFFF
    }

    static func be32(_ v: Int) -> [UInt8] {
        [UInt8((v >> 24) & 0xff), UInt8((v >> 16) & 0xff), UInt8((v >> 8) & 0xff), UInt8(v & 0xff)]
    }
}
