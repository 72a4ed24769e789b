# Merges static archives into one (-DOUT= -DAR= -DARCHIVES=a;b;c) with an ar
# MRI script, which keeps members of the same name from different archives.
file(REMOVE ${OUT})
set(script "CREATE ${OUT}\n")
foreach(a ${ARCHIVES})
  string(APPEND script "ADDLIB ${a}\n")
endforeach()
string(APPEND script "SAVE\nEND\n")
file(WRITE ${OUT}.mri "${script}")
execute_process(COMMAND ${AR} -M INPUT_FILE ${OUT}.mri RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ar -M failed merging into ${OUT}")
endif()
