#include "ft/io/manifest.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ft/base/error.h"
#include "ft/base/fs.h"

namespace ft {
namespace fsys = std::filesystem;
using nlohmann::json;

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
struct DigestFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

json read_json(const fsys::path& file) {
  try {
    return json::parse(fs::read_file(file));
  } catch (const json::exception& e) {
    fail("{}: malformed JSON ({})", file.string(), e.what());
  }
}

// trainer_state.json of a checkpoint written with manifests says one is due.
bool manifest_due(const fsys::path& dir) {
  const fsys::path state = dir / "training_state" / "trainer_state.json";
  if (!fsys::exists(state)) return false;
  const json j = read_json(state);
  return j.contains("manifest") && j["manifest"].is_boolean() && j["manifest"].get<bool>();
}

}  // namespace

std::string sha256_file(const fsys::path& file) {
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(file.c_str(), "rb"));
  if (!f) fail("cannot read {}: {}", file.string(), std::strerror(errno));
  std::unique_ptr<EVP_MD_CTX, DigestFree> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) fail("sha256: cannot initialise OpenSSL's digest");
  std::vector<unsigned char> buf(4 << 20);
  for (;;) {
    const size_t n = std::fread(buf.data(), 1, buf.size(), f.get());
    if (n > 0) EVP_DigestUpdate(ctx.get(), buf.data(), n);
    if (n < buf.size()) {
      if (std::ferror(f.get())) fail("cannot read {}: {}", file.string(), std::strerror(errno));
      break;
    }
  }
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md.data(), &len);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

std::vector<ManifestEntry> build_manifest(const fsys::path& dir) {
  std::vector<ManifestEntry> out;
  for (const auto& e : fsys::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fsys::relative(e.path(), dir).generic_string();
    if (rel == kManifestFile) continue;
    out.push_back({rel, static_cast<uint64_t>(e.file_size()), sha256_file(e.path())});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  return out;
}

void write_manifest(const fsys::path& dir) {
  json files = json::array();
  for (const auto& m : build_manifest(dir)) files.push_back({{"path", m.path}, {"bytes", m.bytes}, {"sha256", m.sha256}});
  const json j{{"format", "ft-manifest-1"}, {"algorithm", "sha256"}, {"files", files}};
  fs::write_file_atomic(dir / kManifestFile, j.dump(1) + "\n");
}

CheckpointCheck verify_checkpoint(const fsys::path& dir) {
  const fsys::path manifest = dir / kManifestFile;
  if (!fsys::exists(manifest)) {
    if (manifest_due(dir)) {
      fail("checkpoint {}: manifest.json is missing: the run stopped before the checkpoint was verified, or the file "
           "was removed; use an earlier checkpoint",
           dir.string());
    }
    return CheckpointCheck::kUnverified;
  }
  const json j = read_json(manifest);
  if (!j.contains("files") || !j["files"].is_array()) fail("{}: no 'files' list", manifest.string());
  for (const auto& f : j["files"]) {
    std::string rel, want;
    uint64_t bytes = 0;
    try {
      rel = f.at("path").get<std::string>();
      bytes = f.at("bytes").get<uint64_t>();
      want = f.at("sha256").get<std::string>();
    } catch (const json::exception& e) {
      fail("{}: malformed entry ({})", manifest.string(), e.what());
    }
    const fsys::path file = dir / rel;
    std::error_code ec;
    if (!fsys::is_regular_file(file, ec)) fail("checkpoint {}: {} is missing (listed in manifest.json)", dir.string(), rel);
    const uint64_t size = fsys::file_size(file, ec);
    if (size != bytes) {
      fail("checkpoint {}: {} is {} bytes, manifest.json says {} ({})", dir.string(), rel, size, bytes,
           size < bytes ? "truncated" : "grown");
    }
    if (sha256_file(file) != want) {
      fail("checkpoint {}: {} does not match its SHA-256 in manifest.json (altered or corrupted)", dir.string(), rel);
    }
  }
  return CheckpointCheck::kVerified;
}

}  // namespace ft
