// libatb_test_framework.so: the name ATB scripts load ($ATB_HOME_PATH/lib/), built from this
// empty file and linked to libcollops_torch.so (torch_bindings/CMakeLists.txt), which it loads.
