#include "app.h"

int main(int argc, char** argv) { return detaudit::cli::cli_main(argc, argv); }
