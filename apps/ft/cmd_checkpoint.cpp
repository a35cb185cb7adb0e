// `ft checkpoint verify DIR`: check a checkpoint against its manifest.json
// by hand (after copying it between machines, before a long resume).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "ft/base/error.h"
#include "ft/io/manifest.h"

namespace ft::app {

void note_unverified(const std::string& dir) {
  std::fprintf(stderr, "ft: warning: checkpoint %s has no manifest.json (written before ft verified checkpoints); loading it unverified\n",
               dir.c_str());
}

void add_checkpoint_command(CLI::App& app, int& exit_code) {
  auto dirs = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand("checkpoint", "checkpoint tools");
  cmd->require_subcommand(1);
  auto* verify = cmd->add_subcommand("verify", "check every file of a checkpoint against its manifest.json (size, SHA-256)");
  verify->add_option("dirs", *dirs, "checkpoint directories")->required();
  verify->callback([dirs, &exit_code] {
    for (const auto& dir : *dirs) {
      if (!std::filesystem::is_directory(dir)) fail("checkpoint {}: not a directory", dir);
      const auto t0 = std::chrono::steady_clock::now();
      if (verify_checkpoint(dir) == CheckpointCheck::kUnverified) {
        note_unverified(dir);
        continue;
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      uint64_t bytes = 0, files = 0;
      for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
        if (e.is_regular_file() && e.path().filename() != kManifestFile) {
          bytes += e.file_size();
          ++files;
        }
      }
      std::cout << fmt::format("{}: verified, {} files, {:.1f} MB in {:.2f} s\n", dir, files, static_cast<double>(bytes) / 1e6, s);
    }
    exit_code = 0;
  });
}

}  // namespace ft::app
