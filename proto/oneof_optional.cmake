# Copies IN to OUT with each proto3 `optional` field written as a oneof of its own:
# `optional T name = N;` becomes `oneof _name { T name = N; }`. The wire and the JSON are the same
# (proto3 `optional` is such a oneof underneath), protoc-c 1.4 can read it, and the C struct
# keeps the field's presence in `_name_case`, which stripping the label would lose.
file(READ ${IN} text)
string(REGEX REPLACE
       "(\n[ \t]*)optional[ \t]+([A-Za-z0-9_.]+)[ \t]+([A-Za-z0-9_]+)[ \t]*=[ \t]*([0-9]+)[ \t]*;"
       "\\1oneof _\\3 { \\2 \\3 = \\4; }" text "${text}")
string(REGEX MATCH "\n[ \t]*optional[ \t]" left "${text}")
if(left)
  message(FATAL_ERROR "${IN}: an `optional` field this rewrite does not understand")
endif()
file(WRITE ${OUT} "${text}")
