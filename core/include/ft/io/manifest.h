// Checkpoint manifests: safetensors and JSON carry no checksum, so a
// half-copied or bit-rotted checkpoint would load and train on garbage.
// Every checkpoint directory gets manifest.json: each file's path (relative,
// '/'-separated), size and SHA-256, written last and atomically. Loading
// verifies it and refuses a missing, truncated or altered file, naming it.
//
// Training hashes a checkpoint off the step loop, in its hidden staging
// directory, and commits the directory only once manifest.json is inside
// (CheckpointWriter), so a visible checkpoint always has its manifest.
// trainer_state.json records that a manifest is due ("manifest": true): a
// checkpoint committed without one (by an ft that hashed after the commit,
// then died) is incomplete (refused, skipped by resume_from: auto), while a
// checkpoint from before manifests existed still loads, reported unverified.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ft {

inline constexpr const char* kManifestFile = "manifest.json";

struct ManifestEntry {
  std::string path;  ///< relative to the checkpoint directory, '/'-separated
  uint64_t bytes = 0;
  std::string sha256;  ///< lower-case hex
};

/// SHA-256 of a file, lower-case hex. Throws ft::Error naming the file.
std::string sha256_file(const std::filesystem::path& file);

/// Every regular file under `dir` except the manifest, sorted by path, hashed.
std::vector<ManifestEntry> build_manifest(const std::filesystem::path& dir);

/// Hashes `dir` and writes `dir`/manifest.json atomically.
void write_manifest(const std::filesystem::path& dir);

enum class CheckpointCheck {
  kVerified,    ///< every listed file present with its size and hash
  kUnverified,  ///< no manifest and none due: a checkpoint from before manifests
};

/// Checks `dir` against its manifest. Throws ft::Error "checkpoint DIR: FILE:
/// <what is wrong>" for a missing, truncated, grown or altered file, or
/// "checkpoint DIR: manifest.json is missing ..." when trainer_state.json
/// says one is due. Files not listed (added later by hand) are not checked.
CheckpointCheck verify_checkpoint(const std::filesystem::path& dir);

}  // namespace ft
