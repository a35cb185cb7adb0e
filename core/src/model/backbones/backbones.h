// The families ft builds, one factory each (in backbones/<family>/), listed
// once in backbones.cpp.
#pragma once

#include <memory>
#include <string>

#include "model/backbone.h"

namespace ft {
namespace model_detail {

std::unique_ptr<Backbone> make_bert();
std::unique_ptr<Backbone> make_roberta(const std::string& model_type, const std::string& class_prefix);
std::unique_ptr<Backbone> make_electra();
std::unique_ptr<Backbone> make_distilbert();
std::unique_ptr<Backbone> make_deberta();
std::unique_ptr<Backbone> make_modernbert();

}  // namespace model_detail
}  // namespace ft
