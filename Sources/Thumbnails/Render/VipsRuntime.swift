import CVips

/// libvips' process-wide set-up, done once.
///
/// libvips must be initialised before first use and its global settings (operation cache,
/// untrusted loaders) apply to the whole process. `ensureInitialized()` runs the set-up
/// through a `static let`, which Swift initialises exactly once, thread-safely (swift_once),
/// so any number of renders on any threads can call it. This is the one piece of global
/// state the pure resize relies on.
enum VipsRuntime {
    private static let initResult: Int32 = {
        let status = vips_init("thumbnails")
        guard status == 0 else { return status }
        // The operation cache would keep decoded images alive between renders; thumbnails
        // never repeat an operation, so caching only costs memory.
        vips_cache_set_max(0)
        vips_cache_set_max_mem(0)
        vips_cache_set_max_files(0)
        // Refuse loaders libvips itself marks as unsafe for untrusted input (ImageMagick,
        // PDF, SVG, …). The renderer also allow-lists formats before loading.
        vips_block_untrusted_set(1)
        return 0
    }()

    /// Initialises libvips if it is not yet; returns false if libvips could not start.
    static func ensureInitialized() -> Bool { initResult == 0 }

    /// Sets how many threads libvips uses *inside* one image (its own thread pool).
    /// Process-wide: the last call wins. With several images in flight on a ``RenderPool``,
    /// 1 is usually best on small machines (files in flight already use the cores).
    static func setThreadsPerImage(_ threads: Int) {
        _ = ensureInitialized()
        vips_concurrency_set(Int32(max(1, threads)))
    }

    /// libvips' version, e.g. "8.14.1".
    static var version: String {
        _ = ensureInitialized()
        return String(cString: vips_version_string())
    }

    /// Takes libvips' error text and clears it. libvips keeps one error buffer for the whole
    /// process, so with several renders in flight a message may carry another image's text
    /// too; it is used for reporting only, never for decisions.
    static func takeError() -> String {
        let text = String(cString: vips_error_buffer())
        vips_error_clear()
        let trimmed = text.split(whereSeparator: \.isNewline).map(String.init).filter { !$0.isEmpty }
        return trimmed.isEmpty ? "unknown libvips error" : trimmed.joined(separator: "; ")
    }
}

/// SHA-256 of bytes as lowercase hex, computed by GLib (already linked through libvips).
public enum ContentHash {
    /// The SHA-256 of `bytes`, 64 lowercase hex characters.
    public static func sha256Hex(_ bytes: UnsafeRawBufferPointer) -> String {
        // GLib returns a g_malloc'd string: copy it out, then g_free it.
        guard let hex = cvips_sha256_hex(bytes.baseAddress, bytes.count) else { return "" }
        defer { g_free(hex) }
        return String(cString: hex)
    }

    /// The SHA-256 of `bytes`, 64 lowercase hex characters.
    public static func sha256Hex(_ bytes: [UInt8]) -> String {
        bytes.withUnsafeBytes { sha256Hex($0) }
    }

    /// The SHA-256 of the UTF-8 encoding of `text`, 64 lowercase hex characters.
    public static func sha256Hex(_ text: String) -> String {
        sha256Hex(Array(text.utf8))
    }
}
