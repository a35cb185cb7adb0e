// Where the embedded default run finds its model and data, from any
// working directory.
#pragma once

#include <functional>
#include <string>

#include "ft/config/config.h"

namespace ft {

/// The embedded default names its inputs "data/<name>". Each such value
/// that still comes from the default (`from_default(key)`) is looked up, in
/// order, under $FT_DATA, the working directory's data/, the checkout's
/// data/ (beside the build directory of this `ft`) and an installed
/// <prefix>/share/ft/data, and rewritten to the first that holds it. None:
/// the value stays, and config.missing_default_data gets a line naming the
/// key, the places looked in and what to set (only a command that reads the
/// input fails: `ft eval --data x.csv` does not need the default's data).
void locate_default_data(RunConfig& config, const std::function<bool(const std::string& key)>& from_default);

}  // namespace ft
