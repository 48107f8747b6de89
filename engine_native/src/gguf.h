// GGUF file reader: memory-maps a file and parses its header, metadata and tensor table.
//
// Not here: interpreting metadata as a model (model.cpp does that) or touching tensor data beyond
// bounds checks. Every read is checked against the mapped size; a malformed file throws gguf_error
// naming the problem (never a read past the map, never exit()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace strata {

// Thrown for any malformed or unreadable GGUF file; the message names the file and the problem.
class gguf_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// GGUF metadata value types (gguf_type numbering).
enum gguf_value_type : int32_t {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
};

// One metadata value. Scalars live in u64 / i64 / f64 / str by type; arrays keep their element
// type and count, strings in arr_str, nested arrays in arr_nested, numbers as a pointer into the map.
struct gguf_value {
    int32_t type = GGUF_TYPE_UINT8;
    uint64_t u64 = 0;   // UINT8/16/32/64 and BOOL
    int64_t i64 = 0;    // INT8/16/32/64
    double f64 = 0.0;   // FLOAT32/64
    std::string str;    // STRING
    int32_t arr_type = GGUF_TYPE_UINT8;
    uint64_t arr_n = 0;
    const uint8_t* arr_data = nullptr;     // (arr_n, element size) little-endian numbers in the map
    std::vector<std::string> arr_str;      // (arr_n,) when arr_type == STRING
    std::vector<gguf_value> arr_nested;    // (arr_n,) when arr_type == ARRAY

    bool is_integer() const;
    bool is_number() const;
    int64_t as_int() const;    // any integer type or BOOL; throws gguf_error otherwise
    double as_float() const;   // any number
};

struct gguf_kv {
    std::string key;
    gguf_value value;
};

struct gguf_tensor {
    std::string name;
    std::vector<int64_t> shape;   // (n_dims,) ne order: shape[0] is the row length
    int32_t type = 0;             // ggml type id
    uint64_t offset = 0;          // absolute byte offset in the file
    uint64_t n_bytes = 0;
    const uint8_t* data = nullptr;   // into the map
    int64_t n_elements() const;
};

// A memory-mapped read-only file (POSIX mmap or Windows CreateFileMapping).
class mapped_file {
  public:
    // random_access: tell the OS not to read ahead around each touched page (POSIX madvise
    // MADV_RANDOM, Windows FILE_FLAG_RANDOM_ACCESS; a hint): for a few scattered bytes of a big file.
    explicit mapped_file(const std::string& path, bool random_access = false);
    ~mapped_file();
    mapped_file(const mapped_file&) = delete;
    mapped_file& operator=(const mapped_file&) = delete;
    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }

  private:
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
#ifdef _WIN32
    void* file_handle_ = nullptr;
    void* map_handle_ = nullptr;
#endif
};

class gguf_file {
  public:
    explicit gguf_file(const std::string& path, bool random_access = false);

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }   // where tensor data starts
    size_t file_size() const { return map_->size(); }
    const uint8_t* file_data() const { return map_->data(); }
    const std::vector<gguf_kv>& metadata() const { return kvs_; }
    const std::vector<gguf_tensor>& tensors() const { return tensors_; }

    const gguf_value* find(const std::string& key) const;   // nullptr when absent
    const gguf_tensor* find_tensor(const std::string& name) const;

    // Typed getters: throw gguf_error naming the key when it is absent or of the wrong kind.
    int64_t get_int(const std::string& key) const;
    int64_t get_int(const std::string& key, int64_t fallback) const;
    double get_float(const std::string& key) const;
    double get_float(const std::string& key, double fallback) const;
    std::string get_str(const std::string& key) const;
    std::string get_str(const std::string& key, const std::string& fallback) const;

  private:
    std::string path_;
    std::unique_ptr<mapped_file> map_;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    std::vector<gguf_kv> kvs_;
    std::vector<gguf_tensor> tensors_;
    std::unordered_map<std::string, size_t> kv_index_;
    std::unordered_map<std::string, size_t> tensor_index_;
};

// ggml type table for the reader (every type GGUF files may hold, supported or not).
// Name as GGUF spells it, or nullptr for an unknown id; block size (elements) and bytes per block.
const char* gguf_type_name(int32_t type);
bool gguf_type_sizes(int32_t type, int64_t* block_size, int64_t* block_bytes);
// Bytes of one metadata number of this GGUF value type (an array's arr_data element); 0: not a number.
size_t gguf_scalar_size(int32_t type);

}  // namespace strata
