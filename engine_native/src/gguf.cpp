// GGUF reader: memory map, header, metadata, tensor table, with every read bounds-checked.
//
// Not here: model interpretation. Format: "GGUF" magic, u32 version (2 or 3), u64 n_tensors,
// u64 n_kv, then n_kv (key, type, value), then n_tensors (name, n_dims, dims[n_dims], type, offset),
// then padding to general.alignment (default 32), then tensor data (offsets relative to that).
#include "gguf.h"

#include "mapped-read-guard.h"

#include <cstring>
#include <limits>

#ifdef _WIN32
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#else
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#endif

namespace strata {

// ---------------------------------------------------------------------------------------------
// type table

namespace {

struct type_row {
    int32_t id;
    const char* name;
    int64_t block_size;
    int64_t block_bytes;
};

// Sizes as ggml / the gguf package define them.
const type_row k_types[] = {
    {0, "F32", 1, 4},          {1, "F16", 1, 2},          {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},       {6, "Q5_0", 32, 22},       {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},       {9, "Q8_1", 32, 40},       {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},    {12, "Q4_K", 256, 144},    {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},    {15, "Q8_K", 256, 292},    {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74},   {18, "IQ3_XXS", 256, 98},  {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},    {21, "IQ3_S", 256, 110},   {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136},  {24, "I8", 1, 1},          {25, "I16", 1, 2},
    {26, "I32", 1, 4},         {27, "I64", 1, 8},         {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},    {30, "BF16", 1, 2},        {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},    {39, "MXFP4", 32, 17},
};

const type_row* find_type(int32_t type) {
    for (const auto& t : k_types) {
        if (t.id == type) return &t;
    }
    return nullptr;
}

constexpr uint64_t k_max_string_bytes = uint64_t(1) << 30;   // no GGUF string is a GiB
constexpr uint32_t k_max_dims = 4;                           // GGML_MAX_DIMS
constexpr int k_max_array_depth = 4;

bool valid_utf8(const uint8_t* s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t len;
        uint32_t cp;
        if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
        else return false;
        if (i + len > n) return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return false;
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += len;
    }
    return true;
}

size_t scalar_size(int32_t type) {
    switch (type) {
        case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
        case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
        case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
        case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
        default: return 0;
    }
}

// Bounds-checked little-endian cursor over the map; `what` names the field being read for errors.
class cursor {
  public:
    cursor(const std::string& path, const uint8_t* data, size_t size) : path_(path), data_(data), size_(size) {}

    [[noreturn]] void fail(const std::string& msg) const {
        throw gguf_error("GGUF " + path_ + ": " + msg);
    }
    void need(uint64_t n, const std::string& what) const {
        if (n > size_ - pos_) {
            fail("truncated file: " + what + " needs " + std::to_string(n) + " bytes at offset " +
                 std::to_string(pos_) + " but the file has " + std::to_string(size_ - pos_) + " left");
        }
    }
    template <typename T>
    T read(const std::string& what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, data_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }
    std::string read_string(const std::string& what) {
        uint64_t n = read<uint64_t>(what + " (length)");
        if (n > k_max_string_bytes) fail(what + ": absurd string length " + std::to_string(n));
        need(n, what);
        const uint8_t* s = data_ + pos_;
        if (!valid_utf8(s, n)) fail(what + ": string is not valid UTF-8");
        pos_ += n;
        return std::string(reinterpret_cast<const char*>(s), n);
    }
    const uint8_t* take(uint64_t n, const std::string& what) {
        need(n, what);
        const uint8_t* p = data_ + pos_;
        pos_ += n;
        return p;
    }
    size_t pos() const { return pos_; }
    size_t left() const { return size_ - pos_; }

  private:
    const std::string& path_;
    const uint8_t* data_;
    size_t size_;
    size_t pos_ = 0;
};

void read_scalar(cursor& c, int32_t type, gguf_value& v, const std::string& what) {
    v.type = type;
    switch (type) {
        case GGUF_TYPE_UINT8: v.u64 = c.read<uint8_t>(what); break;
        case GGUF_TYPE_INT8: v.i64 = c.read<int8_t>(what); break;
        case GGUF_TYPE_UINT16: v.u64 = c.read<uint16_t>(what); break;
        case GGUF_TYPE_INT16: v.i64 = c.read<int16_t>(what); break;
        case GGUF_TYPE_UINT32: v.u64 = c.read<uint32_t>(what); break;
        case GGUF_TYPE_INT32: v.i64 = c.read<int32_t>(what); break;
        case GGUF_TYPE_UINT64: v.u64 = c.read<uint64_t>(what); break;
        case GGUF_TYPE_INT64: v.i64 = c.read<int64_t>(what); break;
        case GGUF_TYPE_FLOAT32: v.f64 = c.read<float>(what); break;
        case GGUF_TYPE_FLOAT64: v.f64 = c.read<double>(what); break;
        case GGUF_TYPE_BOOL: {
            uint8_t b = c.read<uint8_t>(what);
            if (b > 1) c.fail(what + ": bool value " + std::to_string(b) + " is neither 0 nor 1");
            v.u64 = b;
            break;
        }
        case GGUF_TYPE_STRING: v.str = c.read_string(what); break;
        default: c.fail(what + ": unknown value type " + std::to_string(type));
    }
}

void read_value(cursor& c, int32_t type, gguf_value& v, const std::string& what, int depth) {
    if (type != GGUF_TYPE_ARRAY) {
        read_scalar(c, type, v, what);
        return;
    }
    if (depth >= k_max_array_depth) c.fail(what + ": arrays nested deeper than " + std::to_string(k_max_array_depth));
    v.type = GGUF_TYPE_ARRAY;
    int32_t et = c.read<int32_t>(what + " (array element type)");
    uint64_t n = c.read<uint64_t>(what + " (array length)");
    v.arr_type = et;
    v.arr_n = n;
    size_t es = scalar_size(et);
    if (es > 0) {
        if (n > c.left() / es) {
            c.fail(what + ": array of " + std::to_string(n) + " elements runs past the end of the file");
        }
        v.arr_data = c.take(n * es, what);
        if (et == GGUF_TYPE_BOOL) {
            for (uint64_t i = 0; i < n; i++) {
                if (v.arr_data[i] > 1) c.fail(what + ": bool array element is neither 0 nor 1");
            }
        }
    } else if (et == GGUF_TYPE_STRING) {
        // each string takes at least its 8-byte length
        if (n > c.left() / 8) c.fail(what + ": array of " + std::to_string(n) + " strings runs past the end of the file");
        v.arr_str.reserve(n);
        for (uint64_t i = 0; i < n; i++) v.arr_str.push_back(c.read_string(what + "[" + std::to_string(i) + "]"));
    } else if (et == GGUF_TYPE_ARRAY) {
        if (n > c.left() / 12) c.fail(what + ": array of " + std::to_string(n) + " arrays runs past the end of the file");
        v.arr_nested.resize(n);
        for (uint64_t i = 0; i < n; i++) {
            read_value(c, GGUF_TYPE_ARRAY, v.arr_nested[i], what + "[" + std::to_string(i) + "]", depth + 1);
        }
    } else {
        c.fail(what + ": unknown array element type " + std::to_string(et));
    }
}

}  // namespace

const char* gguf_type_name(int32_t type) {
    const type_row* t = find_type(type);
    return t ? t->name : nullptr;
}

bool gguf_type_sizes(int32_t type, int64_t* block_size, int64_t* block_bytes) {
    const type_row* t = find_type(type);
    if (!t) return false;
    *block_size = t->block_size;
    *block_bytes = t->block_bytes;
    return true;
}

// ---------------------------------------------------------------------------------------------
// values

bool gguf_value::is_integer() const {
    switch (type) {
        case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16:
        case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64:
        case GGUF_TYPE_BOOL: return true;
        default: return false;
    }
}

bool gguf_value::is_number() const {
    return is_integer() || type == GGUF_TYPE_FLOAT32 || type == GGUF_TYPE_FLOAT64;
}

int64_t gguf_value::as_int() const {
    switch (type) {
        case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_BOOL:
            return int64_t(u64);
        case GGUF_TYPE_UINT64:
            if (u64 > uint64_t(std::numeric_limits<int64_t>::max())) throw gguf_error("GGUF value too large");
            return int64_t(u64);
        case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
            return i64;
        default: throw gguf_error("GGUF value is not an integer");
    }
}

double gguf_value::as_float() const {
    if (type == GGUF_TYPE_FLOAT32 || type == GGUF_TYPE_FLOAT64) return f64;
    if (type == GGUF_TYPE_UINT64 || type == GGUF_TYPE_UINT8 || type == GGUF_TYPE_UINT16 ||
        type == GGUF_TYPE_UINT32 || type == GGUF_TYPE_BOOL)
        return double(u64);
    if (is_integer()) return double(i64);
    throw gguf_error("GGUF value is not a number");
}

int64_t gguf_tensor::n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

// ---------------------------------------------------------------------------------------------
// memory map

#ifdef _WIN32
mapped_file::mapped_file(const std::string& path, bool random_access) {
    int wn = MultiByteToWideChar(CP_UTF8, 0, path.c_str(), -1, nullptr, 0);
    if (wn <= 0) throw gguf_error("GGUF " + path + ": path is not valid UTF-8");
    std::wstring wpath(size_t(wn), L'\0');
    MultiByteToWideChar(CP_UTF8, 0, path.c_str(), -1, &wpath[0], wn);
    HANDLE fh = CreateFileW(wpath.c_str(), GENERIC_READ, FILE_SHARE_READ, nullptr, OPEN_EXISTING,
                            FILE_ATTRIBUTE_NORMAL | (random_access ? FILE_FLAG_RANDOM_ACCESS : 0), nullptr);
    if (fh == INVALID_HANDLE_VALUE) {
        throw gguf_error("GGUF " + path + ": cannot open (Windows error " + std::to_string(GetLastError()) + ")");
    }
    LARGE_INTEGER sz;
    if (!GetFileSizeEx(fh, &sz)) {
        CloseHandle(fh);
        throw gguf_error("GGUF " + path + ": cannot read the file size");
    }
    size_ = size_t(sz.QuadPart);
    file_handle_ = fh;
    if (size_ == 0) return;
    HANDLE mh = CreateFileMappingW(fh, nullptr, PAGE_READONLY, 0, 0, nullptr);
    if (!mh) {
        CloseHandle(fh);
        throw gguf_error("GGUF " + path + ": CreateFileMapping failed (Windows error " + std::to_string(GetLastError()) + ")");
    }
    void* p = MapViewOfFile(mh, FILE_MAP_READ, 0, 0, 0);
    if (!p) {
        CloseHandle(mh);
        CloseHandle(fh);
        throw gguf_error("GGUF " + path + ": MapViewOfFile failed (Windows error " + std::to_string(GetLastError()) + ")");
    }
    map_handle_ = mh;
    data_ = static_cast<const uint8_t*>(p);
}

mapped_file::~mapped_file() {
    if (data_) UnmapViewOfFile(data_);
    if (map_handle_) CloseHandle(map_handle_);
    if (file_handle_) CloseHandle(file_handle_);
}
#else
mapped_file::mapped_file(const std::string& path, bool random_access) {
    // O_NONBLOCK: a named pipe opens at once (and is refused below as no regular file) instead of waiting
    // for a writer forever; it changes nothing for a regular file
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw gguf_error("GGUF " + path + ": cannot open: " + std::strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        throw gguf_error("GGUF " + path + ": cannot stat: " + std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw gguf_error("GGUF " + path + ": not a regular file");
    }
    size_ = size_t(st.st_size);
    if (size_ > 0) {
        void* p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            ::close(fd);
            throw gguf_error("GGUF " + path + ": mmap failed: " + std::strerror(e));
        }
        data_ = static_cast<const uint8_t*>(p);
        if (random_access) madvise(p, size_, MADV_RANDOM);   // a hint: a failure changes nothing
        // Truncating or rewriting the file in place (cp over it, a download into the same name) takes the
        // mapped pages away: the next read of a weight kills the process with SIGBUS. Say so first.
        const std::string why = "strata: the GGUF file " + path +
                                " was truncated or overwritten in place while it was in use (SIGBUS reading its "
                                "mapped bytes), so the process stops. To replace a model that is being served, "
                                "write the new file beside it and rename it over the old one, or stop Strata first.";
        name_fatal_mapping(p, size_, why.c_str());
    }
    ::close(fd);
}

mapped_file::~mapped_file() {
    if (data_) {
        forget_fatal_mapping(data_);
        munmap(const_cast<uint8_t*>(data_), size_);
    }
}
#endif

// ---------------------------------------------------------------------------------------------
// parse

gguf_file::gguf_file(const std::string& path, bool random_access) : path_(path) {
    map_ = std::make_unique<mapped_file>(path, random_access);
    cursor c(path_, map_->data(), map_->size());

    uint32_t magic = c.read<uint32_t>("magic");
    if (std::memcmp(&magic, "GGUF", 4) != 0) c.fail("bad magic (not a GGUF file)");
    version_ = c.read<uint32_t>("version");
    if (version_ != 2 && version_ != 3) {
        c.fail("unsupported GGUF version " + std::to_string(version_) + " (supported: 2, 3)");
    }
    uint64_t n_tensors = c.read<uint64_t>("tensor count");
    uint64_t n_kv = c.read<uint64_t>("metadata count");
    // each kv takes >= 8 (key length) + 4 (type) + 1 bytes; each tensor >= 8 + 4 + 4 + 8
    if (n_kv > c.left() / 13) c.fail("absurd metadata count " + std::to_string(n_kv) + " for the file size");
    if (n_tensors > c.left() / 24) c.fail("absurd tensor count " + std::to_string(n_tensors) + " for the file size");

    kvs_.resize(n_kv);
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv& kv = kvs_[i];
        kv.key = c.read_string("metadata key #" + std::to_string(i));
        if (kv.key.empty()) c.fail("metadata key #" + std::to_string(i) + " is empty");
        if (kv_index_.count(kv.key)) c.fail("duplicate metadata key '" + kv.key + "'");
        int32_t type = c.read<int32_t>("type of metadata '" + kv.key + "'");
        read_value(c, type, kv.value, "metadata '" + kv.key + "'", 0);
        kv_index_[kv.key] = i;
    }

    if (const gguf_value* a = find("general.alignment")) {
        if (a->type != GGUF_TYPE_UINT32) c.fail("general.alignment must be a uint32");
        if (a->u64 == 0 || (a->u64 & (a->u64 - 1)) != 0) {
            c.fail("general.alignment " + std::to_string(a->u64) + " is not a power of two");
        }
        alignment_ = a->u64;
    }

    tensors_.resize(n_tensors);
    for (uint64_t i = 0; i < n_tensors; i++) {
        gguf_tensor& t = tensors_[i];
        t.name = c.read_string("tensor #" + std::to_string(i) + " name");
        const std::string what = "tensor '" + t.name + "'";
        if (tensor_index_.count(t.name)) c.fail("duplicate tensor name '" + t.name + "'");
        uint32_t n_dims = c.read<uint32_t>(what + " dimension count");
        if (n_dims == 0 || n_dims > k_max_dims) {
            c.fail(what + ": dimension count " + std::to_string(n_dims) + " (must be 1.." + std::to_string(k_max_dims) + ")");
        }
        t.shape.resize(n_dims);
        int64_t n_el = 1;
        for (uint32_t d = 0; d < n_dims; d++) {
            uint64_t dim = c.read<uint64_t>(what + " dimension " + std::to_string(d));
            if (dim == 0 || dim > (uint64_t(1) << 40)) c.fail(what + ": absurd dimension " + std::to_string(dim));
            if (uint64_t(n_el) > uint64_t(std::numeric_limits<int64_t>::max()) / dim) {
                c.fail(what + ": element count overflows");
            }
            t.shape[d] = int64_t(dim);
            n_el *= int64_t(dim);
        }
        t.type = c.read<int32_t>(what + " type");
        int64_t bs = 0, bb = 0;
        if (!gguf_type_sizes(t.type, &bs, &bb)) c.fail(what + ": unknown tensor type id " + std::to_string(t.type));
        if (t.shape[0] % bs != 0) {
            c.fail(what + ": row length " + std::to_string(t.shape[0]) + " is not a multiple of the " +
                   gguf_type_name(t.type) + " block size " + std::to_string(bs));
        }
        uint64_t n_blocks = uint64_t(n_el / bs);
        if (n_blocks > (uint64_t(1) << 62) / uint64_t(bb)) c.fail(what + ": byte size overflows");
        t.n_bytes = n_blocks * uint64_t(bb);
        t.offset = c.read<uint64_t>(what + " offset");   // relative for now
        if (t.offset % alignment_ != 0) {
            c.fail(what + ": data offset " + std::to_string(t.offset) + " is not aligned to " + std::to_string(alignment_));
        }
        tensor_index_[t.name] = i;
    }

    uint64_t pos = c.pos();
    data_offset_ = (pos + alignment_ - 1) / alignment_ * alignment_;
    const uint64_t size = map_->size();
    if (n_tensors > 0 && data_offset_ > size) c.fail("tensor data section starts past the end of the file");
    for (gguf_tensor& t : tensors_) {
        if (t.offset > size || t.n_bytes > size || data_offset_ + t.offset > size - t.n_bytes) {
            c.fail("tensor '" + t.name + "' data (" + std::to_string(t.n_bytes) + " bytes at relative offset " +
                   std::to_string(t.offset) + ") runs past the end of the file (" + std::to_string(size) + " bytes)");
        }
        t.offset += data_offset_;
        t.data = map_->data() + t.offset;
    }
}

const gguf_value* gguf_file::find(const std::string& key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const gguf_tensor* gguf_file::find_tensor(const std::string& name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

int64_t gguf_file::get_int(const std::string& key) const {
    const gguf_value* v = find(key);
    if (!v) throw gguf_error("GGUF " + path_ + ": missing metadata '" + key + "'");
    if (!v->is_integer()) throw gguf_error("GGUF " + path_ + ": metadata '" + key + "' is not an integer");
    return v->as_int();
}

int64_t gguf_file::get_int(const std::string& key, int64_t fallback) const {
    return find(key) ? get_int(key) : fallback;
}

double gguf_file::get_float(const std::string& key) const {
    const gguf_value* v = find(key);
    if (!v) throw gguf_error("GGUF " + path_ + ": missing metadata '" + key + "'");
    if (!v->is_number()) throw gguf_error("GGUF " + path_ + ": metadata '" + key + "' is not a number");
    return v->as_float();
}

double gguf_file::get_float(const std::string& key, double fallback) const {
    return find(key) ? get_float(key) : fallback;
}

std::string gguf_file::get_str(const std::string& key) const {
    const gguf_value* v = find(key);
    if (!v) throw gguf_error("GGUF " + path_ + ": missing metadata '" + key + "'");
    if (v->type != GGUF_TYPE_STRING) throw gguf_error("GGUF " + path_ + ": metadata '" + key + "' is not a string");
    return v->str;
}

std::string gguf_file::get_str(const std::string& key, const std::string& fallback) const {
    return find(key) ? get_str(key) : fallback;
}

size_t gguf_scalar_size(int32_t type) { return scalar_size(type); }

}  // namespace strata
