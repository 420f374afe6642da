"""One submission from notebook to saved grade, on top of `course_tools.grade.jail`."""
